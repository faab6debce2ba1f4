! Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
!
! A Fortran 2008 consumer over the Batchcast C API (batchcast_c.h) through iso_c_binding:
! starts a leader over DATASET in this process, iterates one epoch and checks that each of
! the SAMPLES samples came exactly once. The derived types mirror the C structs field for
! field (docs/api.md); struct_size is set to what this file knows, as *_init would.
!
!   gfortran consumer.f90 $(pkg-config --libs batchcast) -o consumer
!   ./consumer train.h5 48
module batchcast_c
  use, intrinsic :: iso_c_binding
  implicit none
  integer(c_int), parameter :: BC_SUCCESS = 0, BC_END_OF_STREAM = 12

  type, bind(c) :: bc_tensor
    type(c_ptr) :: data
    integer(c_int32_t) :: dtype, ndim
    integer(c_int64_t) :: shape(4)
    integer(c_size_t) :: nbytes
  end type
  type, bind(c) :: bc_batch_info
    integer(c_size_t) :: struct_size
    type(bc_tensor) :: images, labels
    type(c_ptr) :: sample_ids
    integer(c_int64_t) :: size, epoch, index, producer_seq
    real(c_float) :: lr_factor
    integer(c_int32_t) :: layout, repeats, image_size, last_in_epoch, reserved0
  end type
  type, bind(c) :: bc_consumer_config
    integer(c_size_t) :: struct_size
    type(c_ptr) :: address, options
    integer(c_int32_t) :: batch_size = 0, buffer_depth = 0, epochs = 0, rank = -1
    integer(c_int32_t) :: world_size = 0, drop_last = 0
    integer(c_int64_t) :: timeout_ms = 0
    integer(c_int32_t) :: pad_last = 0, start_epoch = 0
    integer(c_int64_t) :: start_batch = 0
  end type
  type, bind(c) :: bc_leader_config
    integer(c_size_t) :: struct_size
    type(c_ptr) :: options, address
    integer(c_int32_t) :: expected_consumers = 1, max_consumer_batch = 0
    integer(c_int64_t) :: join_timeout_ms = 120000
  end type

  interface
    integer(c_int) function bc_leader_start(config, leader) bind(c)
      import :: c_int, c_ptr, bc_leader_config
      type(bc_leader_config), intent(in) :: config
      type(c_ptr), intent(out) :: leader
    end function
    type(c_ptr) function bc_leader_address(leader) bind(c)
      import :: c_ptr
      type(c_ptr), value :: leader
    end function
    integer(c_int) function bc_leader_wait(leader, timeout_ms) bind(c)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: leader
      integer(c_int64_t), value :: timeout_ms
    end function
    integer(c_int) function bc_leader_destroy(leader) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: leader
    end function
    integer(c_int) function bc_consumer_attach(config, consumer) bind(c)
      import :: c_int, c_ptr, bc_consumer_config
      type(bc_consumer_config), intent(in) :: config
      type(c_ptr), intent(out) :: consumer
    end function
    integer(c_int) function bc_consumer_next(consumer, batch, info) bind(c)
      import :: c_int, c_ptr, bc_batch_info
      type(c_ptr), value :: consumer
      type(c_ptr), intent(out) :: batch
      type(bc_batch_info), intent(inout) :: info
    end function
    integer(c_int) function bc_batch_release(batch) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: batch
    end function
    integer(c_int) function bc_consumer_detach(consumer) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: consumer
    end function
    type(c_ptr) function bc_last_error() bind(c)
      import :: c_ptr
    end function
    integer(c_size_t) function strlen(s) bind(c)
      import :: c_size_t, c_ptr
      type(c_ptr), value :: s
    end function
  end interface

contains

  ! Stops with bc_last_error() when a call did not return `want`.
  subroutine check(status, want, what)
    integer(c_int), intent(in) :: status, want
    character(len=*), intent(in) :: what
    character(kind=c_char), pointer :: msg(:)
    type(c_ptr) :: p
    if (status == want) return
    p = bc_last_error()
    call c_f_pointer(p, msg, [strlen(p)])
    write (*, '(a, a, i0, a, 999a)') what, ' failed with status ', status, ': ', msg
    stop 1
  end subroutine
end module

program consumer
  use batchcast_c
  implicit none
  character(len=1024) :: dataset, arg
  character(kind=c_char, len=:), allocatable, target :: options
  type(bc_leader_config), target :: lc
  type(bc_consumer_config), target :: cc
  type(bc_batch_info) :: info
  type(c_ptr) :: leader, cons, batch
  integer(c_int64_t), pointer :: ids(:)
  integer, allocatable :: seen(:)
  integer :: samples, status, i

  call get_command_argument(1, dataset)
  call get_command_argument(2, arg)
  read (arg, *) samples
  allocate (seen(0:samples - 1))
  seen = 0
  options = '--dataset ' // trim(dataset) // ' --epochs 1 --batch-size 8 --image-size 16' // &
            ' --threads 1' // c_null_char

  lc%struct_size = c_sizeof(lc)
  lc%options = c_loc(options)
  lc%address = c_null_ptr
  call check(bc_leader_start(lc, leader), BC_SUCCESS, 'bc_leader_start')

  cc%struct_size = c_sizeof(cc)
  cc%address = bc_leader_address(leader)
  cc%options = c_loc(options)
  call check(bc_consumer_attach(cc, cons), BC_SUCCESS, 'bc_consumer_attach')

  info%struct_size = c_sizeof(info)
  do
    status = bc_consumer_next(cons, batch, info)
    if (status == BC_END_OF_STREAM) exit
    call check(status, BC_SUCCESS, 'bc_consumer_next')
    call c_f_pointer(info%sample_ids, ids, [info%size])
    do i = 1, int(info%size)
      seen(ids(i)) = seen(ids(i)) + 1
    end do
    call check(bc_batch_release(batch), BC_SUCCESS, 'bc_batch_release')
  end do
  call check(bc_consumer_detach(cons), BC_SUCCESS, 'bc_consumer_detach')
  call check(bc_leader_wait(leader, -1_c_int64_t), BC_SUCCESS, 'bc_leader_wait')
  call check(bc_leader_destroy(leader), BC_SUCCESS, 'bc_leader_destroy')
  if (any(seen /= 1)) then
    write (*, '(a)') 'fortran consumer: a sample did not come exactly once: FAILED'
    stop 1
  end if
  write (*, '(a, i0, a)') 'fortran consumer: ', samples, ' samples exactly once: OK'
end program
