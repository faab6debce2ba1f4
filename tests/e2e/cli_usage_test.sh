#!/usr/bin/env bash
# The CLIs' front matter (issue 17): --version, "did you mean" for a mistyped subcommand or
# flag, and the documented exit codes (0 ok, 1 runtime error, 2 usage error). The `batchcast`
# case is labelled unit so that `make asan` runs it: LeakSanitizer then checks the option
# holders of launcher/cli/cmd_*.cc on every command below.
# Usage: cli_usage_test.sh batchcast BATCHCAST_BIN | run BATCHCAST_RUN_BIN
set -uo pipefail
case=$1 bin=$2
fails=0
# expect CODE PATTERN ARGS...: the command exits with CODE and its output matches PATTERN.
expect() {
  local want=$1 pattern=$2
  shift 2
  out=$("$bin" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: $(basename "$bin") $* exited $rc (want $want), output:"; echo "$out"
    echo "      expected to match: $pattern"
    fails=$((fails + 1))
  fi
}
case $case in
  batchcast)
    expect 0 '^batchcast [0-9]+\.[0-9]+\.[0-9]+$' --version
    expect 0 'Exit codes: 0 ok, 1 runtime error, 2 usage error' --help
    expect 2 "unknown subcommand or argument 'inspct' \(did you mean 'inspect'\?\)" inspct x.h5
    expect 2 "batchcast info: unknown flag '--jsn'" info --jsn
    expect 2 "unknown flag '--config-jsn' \(did you mean '--config-json'\?\)" info --config-jsn
    expect 2 "did you mean '--batch-size'" info -c --batch-sze 32
    expect 2 'A subcommand is required|subcommand' 
    expect 2 "batchcast info: .*batch_size" info -c --batch-size zero
    expect 0 '"key": "batch_size"' info -c --batch-size 32
    # Every command line parses the registry alike (ResolveOptions): a bare boolean flag
    # before another flag, as batchcast-run and a trainer's ResolveOptions take it.
    expect 0 '"source": "flag"' info -c --flip --epochs 1
    expect 0 'serve +batchcast serve +the always-on' info
    # A schedule is planned over the run's epochs: a service until stopped has none.
    expect 2 "batchcast serve: .*service: option 'resize' plans progressive resizing over the run's epochs.*batchcast serve --epochs N" serve --socket bc-cli-usage-$$ --flip --resize 'resize(min=8,max=16,step=8)'
    expect 1 'batchcast inspect: .*/nonexistent/x.h5' inspect /nonexistent/x.h5
    ;;
  run)
    expect 0 '^batchcast-run [0-9]+\.[0-9]+\.[0-9]+$' --version
    expect 0 'Exit codes: 0 ok, 1 runtime error, 2 usage error' --help
    expect 2 "unexpected word '--master-adr=h' before '--' \(did you mean '--master-addr'\?\)" --master-adr=h -- true
    expect 2 "did you mean '--batch-size'" --batch-sze 32 -- true
    ;;
  *) echo "unknown case $case"; exit 2 ;;
esac
[ "$fails" -eq 0 ] && echo "cli usage ($case): PASS"
exit $((fails > 0))
