// flopmeter/gloo_env.h — flopmeter's own Gloo group, built from the launch environment (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, as torchrun sets them). No LibTorch types appear here: a trainer without LibTorch
// headers (or the C ABI) can call it. It works in builds of flopmeter with LibTorch and Gloo's headers;
// otherwise it throws flopmeter::error saying so.
//
// Why a group of flopmeter's own: the per-log collective must never share a group with the trainer's
// collectives. On a shared group a rank that skips one on_log leaves the others' all-reduce paired with the
// trainer's next collective, and Gloo kills the whole job; on a group of its own a skipped log costs
// flopmeter an interval and nothing else.
//
// Bounded: make_gloo_communicator_from_env returns or throws on every rank within `timeout` + 0.5 s (plus
// scheduling slack), even when a peer, or rank 0 that hosts the store, dies or hangs during the rendezvous. The store
// connection and the Gloo rendezvous run on a helper thread; when the bound passes, the calling thread
// throws and the attempt is abandoned to that thread, which releases everything when Gloo gives up. (The half
// second lets the store and Gloo, given `timeout` themselves, report a failure they detect with its cause.)
//
// Ownership: the returned communicator owns the store client, the Gloo group and its threads.
// Thread-safety: one thread at a time per communicator (communicator.h). Concurrent calls of this function
// are safe but pair up across ranks by call order (see store_key_prefix).
// Dead peers: Gloo sends with writev(), so a write to a peer that closed its connection raises SIGPIPE. Python
// ignores SIGPIPE; a C or C++ trainer should too (std::signal(SIGPIPE, SIG_IGN)) so that a dead peer makes a
// collective fail instead of killing the trainer. flopmeter does not change signal dispositions itself.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "flopmeter/export.h"
#include "flopmeter/communicator.h"

namespace flopmeter FLOPMETER_EXPORT {

// Where make_gloo_communicator_from_env finds its peers. The defaults suit a trainer whose rank 0 already
// hosts a c10d TCPStore at MASTER_ADDR:MASTER_PORT (torchrun-style launches).
struct gloo_env_options {
  // Bound on the whole call on every rank (store connection plus Gloo rendezvous), and Gloo's timeout for
  // each later collective. Must be > 0. Default 60 s.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  // false (default): every rank connects as a client to a TCPStore server that the trainer hosts at
  // MASTER_ADDR:MASTER_PORT + store_port_offset. true: the rank with RANK=0 starts that server itself (use
  // when the trainer hosts none there, or with a non-zero store_port_offset next to the trainer's store).
  bool start_store_server = false;
  // Added to MASTER_PORT; the sum must be a valid port (1..65535). Default 0.
  int store_port_offset = 0;
  // Every key flopmeter writes goes under "<store_key_prefix>/<n>/", where n counts the calls to
  // make_gloo_communicator_from_env in this process (so the n-th call on every rank meets the n-th call on
  // the others, and never the trainer's own keys). Default "flopmeter".
  std::string store_key_prefix = "flopmeter";
  // Address Gloo binds to. Empty (default): the interfaces named by GLOO_SOCKET_IFNAME (comma-separated)
  // if that variable is set, else the address this host's name resolves to (loopback as a fallback).
  std::string gloo_hostname;
  // How the ordinary log's fixed-size SUM and MAX run (flopmeter/communicator.h). automatic (default):
  // the log-depth collectives from log_depth_min_ranks ranks on, Gloo's ring below.
  small_allreduce allreduce = small_allreduce::automatic;
};

// Builds a private Gloo group over every rank of the job: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT must
// be set. Throws flopmeter::error naming the variable when one is missing or malformed (RANK not in
// [0, WORLD_SIZE), a port out of range...), when the store cannot be reached, and when the rendezvous fails
// or does not finish within `options.timeout`. Every rank must call it, in the same order relative to its
// other calls of this function.
std::shared_ptr<communicator> make_gloo_communicator_from_env(const gloo_env_options& options = {});

// Same, with default options except the timeout.
std::shared_ptr<communicator> make_gloo_communicator_from_env(std::chrono::milliseconds timeout);

}  // namespace FLOPMETER_EXPORT
