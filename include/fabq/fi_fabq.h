/*
 * fi_fabq.h: fabq's extension to libfabric: asynchronous device events and fault injection.
 *
 * SYNOPSIS
 *   #include <rdma/fabric.h>
 *   #include <fabq/fi_fabq.h>
 *
 *   struct fi_fabq_async_ops *ops;
 *   fi_open_ops(&domain->fid, FI_FABQ_ASYNC_OPS, 0, (void **)&ops, NULL);
 *
 *   struct fi_fabq_async_event ev;
 *   while (ops->get_event(domain, &ev, -1) == 0) {
 *           printf("%s on %p\n", ops->event_type_str(ev.type), (void *)ev.fid);
 *           ops->ack_event(domain, &ev);
 *   }
 *
 * DESCRIPTION
 *   Every fabq domain has an asynchronous event channel, the verbs model
 *   (ibv_get_async_event(3)) brought into libfabric. It collects what happens to the domain's
 *   device (the network interface the domain is named after), to its port, and to the
 *   endpoints, completion queues and shared receive contexts the domain owns, outside any
 *   single operation. The channel exists from fi_domain() on: events raised before the
 *   application first reads it wait in it, oldest first.
 *
 *   Affiliated events (endpoint, CQ and SRX kinds) go only to the channel of the domain that
 *   owns the object. Port and device events go to every fabq domain of the process opened on
 *   that interface.
 *
 *   Error kinds (the FATAL/ERR kinds below) are also written, as an fi_eq_err_entry, to the
 *   EQ bound to the affected object: an endpoint's EQ (fi_ep_bind) for endpoint kinds, the
 *   domain's EQ (fi_domain_bind) for CQ, SRX, port and device kinds. The entry has
 *   fid = the affected object (the domain for port and device kinds), context = that
 *   object's fid->context, err = the errno listed in the table, prov_errno = the event kind,
 *   and fi_eq_strerror() names the kind. The EQ entry is written before the event enters the
 *   channel, so a reader of the channel finds it already there. Info kinds go to the channel
 *   only. Without a bound EQ the event still reaches the channel.
 *
 *   A fatal event leaves its object in an error state until it is closed: an endpoint after
 *   FI_FABQ_EVENT_EP_FATAL, FI_FABQ_EVENT_EP_REQ_ERR or FI_FABQ_EVENT_EP_ACCESS_ERR fails
 *   every posted operation with an error completion (err FI_EIO, prov_errno = the kind) and
 *   every later post with -FI_EOPBADSTATE; a CQ after FI_FABQ_EVENT_CQ_ERR is overrun
 *   (fi_cq(3): reads drain what is stored, then -FI_EAVAIL and an FI_EOVERRUN error entry);
 *   an SRX after FI_FABQ_EVENT_SRX_ERR refuses posts with -FI_EOPBADSTATE and its bound
 *   endpoints get FI_FABQ_EVENT_EP_FATAL and FI_FABQ_EVENT_LAST_WQE_REACHED; a domain after
 *   FI_FABQ_EVENT_DEVICE_FATAL refuses to open objects with -FI_EOPBADSTATE. Port events
 *   change the port state (port_state below) and nothing else.
 *
 * EVENT KINDS (value, affected object, class, err on the EQ, real cause in fabq)
 *   FI_FABQ_EVENT_COMM_EST          endpoint  info   -       the first message arrives *
 *   FI_FABQ_EVENT_SQ_DRAINED        endpoint  info   -       fi_shutdown: every send is out *
 *   FI_FABQ_EVENT_PATH_MIG          endpoint  info   -       injection only
 *   FI_FABQ_EVENT_LAST_WQE_REACHED  endpoint  info   -       an endpoint bound to an SRX fails
 *   FI_FABQ_EVENT_EP_FATAL          endpoint  error  FI_EIO          peer gone (keep-alive) or
 *                                                                    socket error *; SRX error
 *   FI_FABQ_EVENT_EP_REQ_ERR        endpoint  error  FI_EREMOTEIO    the peer broke the wire
 *                                                                    protocol *
 *   FI_FABQ_EVENT_EP_ACCESS_ERR     endpoint  error  FI_EACCES       MSG: the peer's RMA or
 *                                                                    atomic named a bad key, a
 *                                                                    range outside the region
 *                                                                    or an access not granted *
 *   FI_FABQ_EVENT_PATH_MIG_ERR      endpoint  error  FI_EHOSTUNREACH injection only
 *   FI_FABQ_EVENT_CQ_ERR            CQ        error  FI_EOVERRUN     injection (overrun)
 *   FI_FABQ_EVENT_SRX_LIMIT_REACHED SRX       info   -       posted receives fell below the
 *                                                            armed limit (srx_arm_limit)
 *   FI_FABQ_EVENT_SRX_ERR           SRX       error  FI_EIO          injection only
 *   FI_FABQ_EVENT_PORT_ACTIVE       port      info   -       the interface is up and running
 *   FI_FABQ_EVENT_PORT_ERR          port      error  FI_ENETDOWN     the interface went down
 *   FI_FABQ_EVENT_ADDR_CHANGE       port      info   -       link-layer (MAC) address changed
 *   FI_FABQ_EVENT_KEY_TABLE_CHANGE  port      info   -       injection only
 *   FI_FABQ_EVENT_GID_CHANGE        port      info   -       an IP address added or removed
 *   FI_FABQ_EVENT_SM_CHANGE         port      info   -       injection only
 *   FI_FABQ_EVENT_CLIENT_REREGISTER port      info   -       injection only
 *   FI_FABQ_EVENT_DEVICE_FATAL      device    error  FI_ENODEV       the interface was deleted
 *   (* on a connected FI_EP_MSG endpoint; on FI_EP_RDM a failed connection fails the sends
 *   to that peer and raises nothing.) Every kind can also be raised by injection (event=).
 *   They correspond one to one to verbs' IBV_EVENT_* (ADDR_CHANGE is LID_CHANGE,
 *   KEY_TABLE_CHANGE is PKEY_CHANGE, SRX is SRQ, EP is QP). The values are distinct from
 *   every fabric errno, so a prov_errno holding one is unambiguous.
 *
 * FAULT INJECTION
 *   Faults are rules. The environment variable FI_FABQ_FAULTS holds rules separated by ';'
 *   and applies them to every domain opened while it is set; inject() adds rules to one open
 *   domain. A rule is comma-separated key=value pairs:
 *
 *     what (exactly one):
 *       event=<kind>          raise that event, with all its effects; <kind> is the name
 *                             without the prefix, any case: ep_fatal, cq_err, port_err, ...
 *       error=<err>[:<prov>]  an operation of the target completes in error: err is a fabric
 *                             errno name (FI_EIO, EIO) or a positive number; prov_errno
 *                             defaults to 0. On an endpoint, the receive whose post
 *                             triggers the rule completes in error at once (without ops=
 *                             or prob=, the next post does). On a CQ, the completion that
 *                             triggers it becomes an error completion (without ops= or
 *                             prob=, one is written with op_context NULL; a full CQ then
 *                             overruns and raises CQ_ERR).
 *       net=<fault>           (on=ep only) applied once, by the endpoint's next operation it
 *                             concerns: reject / timeout, its next fi_connect is refused
 *                             (FI_ECONNREFUSED) / never answered (FI_ETIMEDOUT); on a
 *                             datagram endpoint its next fi_join fails that way, as an EQ
 *                             error entry. drop, its next message is lost on the way;
 *                             corrupt, it arrives with a damaged header: a connection's peer
 *                             fails the connection (EP_REQ_ERR), a datagram's receiver drops
 *                             it (its header's check catches it).
 *     on=<target> (default: domain):
 *       domain                the domain itself (port and device kinds)
 *       ep:<i> | cq:<i> | srx:<i>
 *                             the i-th object of that kind opened in the domain, from 0
 *       ep:<name> | cq:<name> | srx:<name>
 *                             the object named <name> with set_name()
 *     when (at most one; none: at once, or as soon as the target is opened):
 *       ops=<n>               on the n-th operation of the target (n >= 1), and on every
 *                             n-th after it while count allows. Operations are
 *                             receives posted on an endpoint or SRX, completions the
 *                             provider delivers to a CQ, objects opened (CQ, counter,
 *                             endpoint, SRX) on a domain.
 *       ms=<t>                t >= 1 milliseconds after the rule meets its target (the target
 *                             opens, or inject() finds it open), and again every t ms
 *                             while count allows.
 *       prob=<p>              on every operation with probability p (0 < p <= 1), drawn from
 *                             a generator seeded by seed=<s> (default 1): the same seed and
 *                             the same sequence of operations fire the same faults.
 *     count=<c>               how many times the rule may fire (default 1; 0: no limit).
 *
 *   Example:
 *     FI_FABQ_FAULTS='event=ep_fatal,on=ep:0,ops=3;
 * error=FI_EIO:7,on=cq:0,prob=0.01,seed=9,count=0'
 *
 *   An event whose object kind does not match the target (cq_err on an endpoint) or an
 *   unknown key, kind, errno or target makes the spec invalid: inject() returns -FI_EINVAL
 *   and fi_domain() fails with -FI_EINVAL for an invalid FI_FABQ_FAULTS (both log why).
 *
 * THREADS
 *   Every operation may be called from any thread. get_event() is atomic: with many threads
 *   reading one channel each event goes to exactly one of them, oldest first.
 */
#ifndef FABQ_FI_FABQ_H
#define FABQ_FI_FABQ_H

#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The name to pass to fi_open_ops() on a fabq domain. */
#define FI_FABQ_ASYNC_OPS "fabq_async_ops_v1"

enum fi_fabq_event_type {
  FI_FABQ_EVENT_COMM_EST = 0x1001,
  FI_FABQ_EVENT_SQ_DRAINED,
  FI_FABQ_EVENT_PATH_MIG,
  FI_FABQ_EVENT_LAST_WQE_REACHED,
  FI_FABQ_EVENT_EP_FATAL,
  FI_FABQ_EVENT_EP_REQ_ERR,
  FI_FABQ_EVENT_EP_ACCESS_ERR,
  FI_FABQ_EVENT_PATH_MIG_ERR,
  FI_FABQ_EVENT_CQ_ERR,
  FI_FABQ_EVENT_SRX_LIMIT_REACHED,
  FI_FABQ_EVENT_SRX_ERR,
  FI_FABQ_EVENT_PORT_ACTIVE,
  FI_FABQ_EVENT_PORT_ERR,
  FI_FABQ_EVENT_ADDR_CHANGE,
  FI_FABQ_EVENT_KEY_TABLE_CHANGE,
  FI_FABQ_EVENT_GID_CHANGE,
  FI_FABQ_EVENT_SM_CHANGE,
  FI_FABQ_EVENT_CLIENT_REREGISTER,
  FI_FABQ_EVENT_DEVICE_FATAL,
};
#define FI_FABQ_EVENT_FIRST FI_FABQ_EVENT_COMM_EST
#define FI_FABQ_EVENT_LAST FI_FABQ_EVENT_DEVICE_FATAL

/* ONE-SIDED ERRORS
 *   An RMA or atomic operation the target refused completes at its initiator in error: err
 *   FI_EKEYREJECTED (no region has the key, or it was closed), FI_EACCES (the range is not
 *   inside the region, or the region does not grant the access), FI_EOPNOTSUPP (an atomic
 *   the target does not perform) or FI_EREMOTEIO (the target endpoint failed), and
 *   prov_errno one of these, saying which. The target touched no memory.
 *   Between processes of one host a large RMA write or read is copied directly between the
 *   two processes' memory (fi_fabq(7) RMA AND ATOMICS). If the kernel refuses that copy
 *   after the connection found it allowed (the initiator made itself non-dumpable since), or
 *   the initiator's buffer is not mapped, the operation completes with FI_EIO and
 *   FI_FABQ_RMA_COPY_FAILED; a write may have changed part of the target's range. */
enum fi_fabq_rma_error {
  FI_FABQ_RMA_BAD_KEY = 1,
  FI_FABQ_RMA_OUT_OF_BOUNDS = 2,
  FI_FABQ_RMA_NOT_GRANTED = 3,
  FI_FABQ_RMA_BAD_ATOMIC = 4,
  FI_FABQ_RMA_TARGET_FAILED = 5,
  FI_FABQ_RMA_COPY_FAILED = 6,
};

/* What port_state() reports. A fabq device (interface) has one port, number 1. */
enum fi_fabq_port_state {
  FI_FABQ_PORT_DOWN = 1,   /* the interface is down or has no carrier */
  FI_FABQ_PORT_ACTIVE = 4, /* up and running: IFF_UP and IFF_RUNNING */
};

struct fi_fabq_async_event {
  uint32_t type;     /* enum fi_fabq_event_type */
  uint32_t port_num; /* port kinds: 1; other kinds: 0 */
  /* The affected object: the endpoint (fid_ep), CQ (fid_cq) or SRX (fid_ep of class
   * FI_CLASS_SRX_CTX); for port and device kinds the domain the event was read from. */
  struct fid* fid;
  void* context;    /* fid->context when the event was raised */
  uint64_t time_ns; /* when it was raised: CLOCK_REALTIME, nanoseconds since the epoch */
  uint64_t seq;     /* 1, 2, 3, ... in the order this domain's channel received events */
};

struct fi_fabq_async_ops {
  size_t size; /* sizeof(struct fi_fabq_async_ops) of the library */

  /* Takes the oldest event of the domain's channel into *event. timeout in milliseconds:
   * 0 does not block, -1 blocks without limit.
   * Returns 0 with an event, -FI_EAGAIN when none arrived in time (at once for 0),
   * -FI_EINVAL for a null or non-fabq argument. Signals do not end the wait: to stop a
   * reader, poll get_fd() together with your own descriptor instead. The event is then
   * the caller's until ack_event(). */
  int (*get_event)(struct fid_domain* domain, struct fi_fabq_async_event* event, int timeout);

  /* *fd becomes a descriptor that is readable (POLLIN/EPOLLIN) while the channel holds an
   * event, for poll/epoll/select; read events with get_event(.., 0), which may return
   * -FI_EAGAIN when another thread took it first. The descriptor is the domain's: do not
   * read or close it; it is valid until the domain closes. Returns 0 or -FI_EINVAL. */
  int (*get_fd)(struct fid_domain* domain, int* fd);

  /* Acknowledges an event get_event() returned. Until every event read for an object is
   * acknowledged, fi_close() of that object returns -FI_EBUSY (for port and device events,
   * of the domain). Events still unread when their object closes are removed from the
   * channel. Returns 0, or -FI_EINVAL when the event is not one read and not yet
   * acknowledged on this domain. */
  int (*ack_event)(struct fid_domain* domain, const struct fi_fabq_async_event* event);

  /* "FI_FABQ_EVENT_PORT_ERR" etc.; "unknown" for any other value. Static storage. */
  const char* (*event_type_str)(uint32_t type);

  /* Adds fault rules (grammar above) to the domain. Returns 0 or -FI_EINVAL. */
  int (*inject)(struct fid_domain* domain, const char* spec);

  /* Gives an endpoint, CQ or SRX of this domain a name for on=<kind>:<name> targets (at
   * most 63 bytes). Rules naming it that are already installed apply from now on.
   * Returns 0, -FI_EINVAL for a non-fabq object or a bad name. */
  int (*set_name)(struct fid* fid, const char* name);

  /* Arms FI_FABQ_EVENT_SRX_LIMIT_REACHED: raised once when the SRX's posted receives drop
   * below limit, after which the limit is 0 (disarmed), as ibv_modify_srq(IBV_SRQ_LIMIT).
   * limit 0 disarms. Returns 0, -FI_EINVAL for a non-fabq SRX. */
  int (*srx_arm_limit)(struct fid_ep* srx, size_t limit);

  /* The port state of the domain's interface (enum fi_fabq_port_state), or -FI_EINVAL. */
  int (*port_state)(struct fid_domain* domain);
};

#ifdef __cplusplus
}
#endif

#endif /* FABQ_FI_FABQ_H */
