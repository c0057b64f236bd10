// What the tests of the wire format and of the handshake both name: every op, and its name for
// test names and failure messages.
#pragma once

#include "xport/wire.h"

namespace fabq::xport::wire::test_ops {

inline constexpr Op kAllOps[] = {
    Op::kConnReq, Op::kConnAccept,  Op::kConnReject,   Op::kConnReady, Op::kMsg,
    Op::kTagged,  Op::kAckReceived, Op::kAckDelivered, Op::kShutdown,  Op::kChallenge,
    Op::kProof,   Op::kWrite,       Op::kReadReq,      Op::kReadResp,  Op::kRmaAck,
    Op::kAtomic,  Op::kAtomicResp};

inline const char* op_name(Op op) {
  switch (op) {
    case Op::kConnReq:
      return "ConnReq";
    case Op::kConnAccept:
      return "ConnAccept";
    case Op::kConnReject:
      return "ConnReject";
    case Op::kConnReady:
      return "ConnReady";
    case Op::kMsg:
      return "Msg";
    case Op::kTagged:
      return "Tagged";
    case Op::kAckReceived:
      return "AckReceived";
    case Op::kAckDelivered:
      return "AckDelivered";
    case Op::kShutdown:
      return "Shutdown";
    case Op::kChallenge:
      return "Challenge";
    case Op::kProof:
      return "Proof";
    case Op::kWrite:
      return "Write";
    case Op::kReadReq:
      return "ReadReq";
    case Op::kReadResp:
      return "ReadResp";
    case Op::kRmaAck:
      return "RmaAck";
    case Op::kAtomic:
      return "Atomic";
    case Op::kAtomicResp:
      return "AtomicResp";
  }
  return "Unknown";
}

}  // namespace fabq::xport::wire::test_ops
