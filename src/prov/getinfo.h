// fabq provider: fi_getinfo(3).
//
// One fi_info per IPv4 interface (loopback included): fabric name = the interface's subnet
// ("127.0.0.0/8"), domain name = the interface ("lo"), as libfabric's tcp provider names them.
// Hints are honoured completely, since libfabric does no matching of its own: every requested
// capability, mode, mr_mode, endpoint type, address format, ordering, threading and progress
// model, size and count must be satisfiable or the interface is left out; the result states
// what fabq really provides. When nothing matches: -FI_ENODATA.
//
// fabq refuses to be the core under a utility provider (a query with OFI_CORE_PROV_ONLY from
// ofi_rxm/ofi_rxd gets -FI_ENODATA), as libfabric itself arranges for sockets and shm: fabq's
// queues are the point, and a layer above would replace them.
//
// node/service/FI_SOURCE: with FI_SOURCE they name the local address (the interface that owns
// it; the port goes into src_addr); without it they name the destination (dest_addr), and the
// interface is the one the kernel routes that destination through. hints->src_addr and
// hints->dest_addr (struct sockaddr_in) work the same way.
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <string>

namespace fabq::prov {

int getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const fi_info* hints, fi_info** info);

// Whether a fabric (subnet) / a domain (interface) of that name exists now.
bool fabric_exists(const std::string& name);
bool domain_exists(const std::string& fabric, const std::string& domain);

}  // namespace fabq::prov
