// A TCP rendezvous for ranks on several hosts, spelled as torchrun spells it (--master-addr,
// --master-port, rank, world size): rank 0 listens, every other rank connects and says who it is,
// and once all have arrived rank 0 hands each the same bytes (the ncclUniqueId the NCCL
// communicators are made from). Tested on loopback with a thread and with a process per rank.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer::parallel {

struct RendezvousConfig {
  std::string master_addr = "127.0.0.1";  // IPv4 address or host name of rank 0
  int master_port = 29500;
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds timeout = std::chrono::minutes(5);  // for everyone to arrive
};

// Every rank calls it; rank 0 passes `payload` (the others' is ignored). Returns rank 0's payload
// on every rank once all world_size ranks have joined. Errors (a port in use, a rank that never
// comes, two ranks with the same number, disagreeing world sizes) are deepinfer::Error on the
// ranks that see them; rank 0 tells a peer it rejects why.
std::vector<uint8_t> rendezvous(const RendezvousConfig& config, const std::vector<uint8_t>& payload);

}  // namespace deepinfer::parallel
