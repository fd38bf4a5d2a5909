package peerstream

import (
	"errors"
	"fmt"

	"github.com/meshfed/meshfed/federation"
)

// Reasons of meshfed_federation_peer_messages_rejected_total.
const (
	peerRejectDecode     = "decode"      // frame is not the protobuf of a PeerMessage
	peerRejectInvalid    = "invalid"     // PeerMessage.Validate failed
	peerRejectNoHello    = "no_hello"    // first frame is not a Hello, or none came in time
	peerRejectHelloAgain = "hello_again" // a Hello after the first frame
	peerRejectIdentity   = "identity"    // Hello or certificate names another replica
	peerRejectDirection  = "direction"   // a replica dialed although this one dials it
	peerRejectProtocol   = "protocol"    // Hello names another protocol version
)

var peerRejectReasons = []string{
	peerRejectDecode, peerRejectInvalid, peerRejectNoHello, peerRejectHelloAgain,
	peerRejectIdentity, peerRejectDirection, peerRejectProtocol,
}

// peerFrame is an encoded PeerMessage, ready to send to any number of
// peers: a broadcast is marshalled once.
type peerFrame struct {
	kind string
	data []byte
}

// encodePeerFrame validates and marshals m.
func encodePeerFrame(m *federation.PeerMessage) (peerFrame, error) {
	data, err := federation.EncodePeerMessage(m)
	if err != nil {
		return peerFrame{}, err
	}
	if len(data) > MaxPeerFrameBytes-peerFrameOverhead {
		return peerFrame{}, fmt.Errorf("%w: %s frame of %d bytes, more than %d", federation.ErrMalformedMessage, m.Kind(), len(data), MaxPeerFrameBytes-peerFrameOverhead)
	}
	return peerFrame{kind: m.Kind(), data: data}, nil
}

// decodePeerFrame decodes and validates a received frame. On error it also
// returns the rejection reason.
func decodePeerFrame(data []byte) (*federation.PeerMessage, string, error) {
	if len(data) > MaxPeerFrameBytes {
		return nil, peerRejectDecode, fmt.Errorf("%w: frame of %d bytes", federation.ErrMalformedMessage, len(data))
	}
	m, err := federation.DecodePeerMessage(data)
	switch {
	case errors.Is(err, federation.ErrUndecodable):
		return nil, peerRejectDecode, err
	case err != nil:
		return nil, peerRejectInvalid, err
	}
	return m, "", nil
}
