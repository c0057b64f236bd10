// fabq provider: the shared secret that authenticates the two ends of every connection, and
// every datagram of a datagram endpoint (fi_fabq(7) RELIABILITY AND SECURITY).
//
// Without a secret, a peer is whoever connects: it can announce any name (fi_cq_readfrom then
// names whichever fi_addr_t has that address) and its messages consume posted receives. With one,
// both ends prove in the connection handshake that they hold it (HMAC-SHA256 over fresh nonces
// of both sides and the request itself, xport/wire.h; the secret never crosses the wire), and a
// peer that cannot is refused before anything it sends is reported, placed or accepted. A
// datagram endpoint with one authenticates each datagram instead (xport/dgram_wire.h: a MAC
// under a key derived from the secret, and a sequence number its receiver takes once), and
// carries 40 bytes less payload in each (xport::kMaxAuthDgramPayload).
//
// Where the secret comes from, first found: the auth_key of the fi_info's ep_attr, then the
// default of the domain the endpoint is opened in (the domain_attr->auth_key of the fi_info
// fi_domain was given: fi_domain(3) "the default authorization key to associate with endpoint
// ... registrations created within the domain"), then of the fi_info's own domain_attr
// (libfabric's attributes, as given in the hints to fi_getinfo), then the FI_FABQ_AUTH_KEY
// parameter (its bytes, for every endpoint of the process).
//
// Threads: a key is immutable once made; any thread may use it through a copy (HmacSha256 is
// a value).
#pragma once

#include <rdma/fabric.h>

#include <cstddef>
#include <optional>

#include "core/hmac.h"

namespace fabq::prov {

// The largest auth_key fabq accepts (fi_getinfo refuses hints with a larger one).
inline constexpr size_t kMaxAuthKeySize = 1024;

// The default secret of the endpoints of a domain opened with `info`: its domain_attr's
// auth_key, keyed for HMAC; nullopt when there is none.
std::optional<core::HmacSha256> domain_auth_key_of(const fi_info& info);
// The secret, keyed for HMAC, that connections of an endpoint or passive endpoint opened with
// `info` prove (and datagrams of a datagram endpoint carry); nullopt when there is none.
// `domain_key`: the default of the domain it is opened in (null: none, or no domain: a passive
// endpoint).
std::optional<core::HmacSha256> auth_key_of(const fi_info& info,
                                            const core::HmacSha256* domain_key = nullptr);
// Whether auth_key_of(info, domain_key) has one, without keying it. Any member of `info` may be
// null.
bool has_auth_key(const fi_info& info, const core::HmacSha256* domain_key = nullptr);

}  // namespace fabq::prov
