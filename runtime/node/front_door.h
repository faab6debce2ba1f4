// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// What the front doors that run the native pipeline on one node share (`batchcast serve`,
// the Python Leader, the launcher's leader task, the C API's leader): the options check, a
// producer::Producer over the node's dataset, and GPU staging on this process's GPU 0 when
// the options ask for it (gpu=auto|on: the Producer's slot hook). Each front door adds only
// what is its own (signals, a trainer child, a Python or C handle).
#pragma once

#include <memory>
#include <string>

#include "batchcast/status.h"
#include "producer/producer.h"

namespace batchcast::node {

// "batchcast-<uid>-service": the socket name `batchcast serve` and its consumers default to.
std::string DefaultServiceSocket();

// A Producer of the native pipeline for config.front_door: checks the options against the
// front-door table and creates or refuses its telemetry output paths before it opens the
// dataset (*refused, if given: true when one of those failed, a usage error for a command
// line), then stages on GPU 0 when the options and a device allow (*staged, if given: one
// line saying so; empty on the host path, which is logged).
Result<std::unique_ptr<producer::Producer>> CreateNodeProducer(
    const producer::ProducerConfig& config, std::string* staged = nullptr,
    bool* refused = nullptr);

}  // namespace batchcast::node
