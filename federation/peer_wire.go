package federation

// The wire format of the peer stream: frames, messages and their checks.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshfed/meshfed/federation/peerpb"
	"github.com/meshfed/meshfed/pkg/model"
)

// Kinds of frames, the "kind" label of the message metrics.
const (
	peerKindHello    = "hello"
	peerKindSnapshot = "snapshot"
	peerKindDelta    = "delta"
	peerKindResync   = "resync"
	peerKindRemoved  = "superseded"
	peerKindTrust    = "trust"
	peerKindProxies  = "proxy_status"
)

var peerKinds = []string{peerKindHello, peerKindSnapshot, peerKindDelta, peerKindResync, peerKindRemoved, peerKindTrust, peerKindProxies}

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

// Hello is the first frame each way on a peer stream.
type Hello struct {
	// Replica is the sender; it must match its certificate.
	Replica ReplicaID `json:"replica"`
	// Digest is the version of every cluster the sender holds, so the
	// receiver can send it what it is missing.
	Digest Digest `json:"digest,omitempty"`
	// Protocol is PeerProtocol of the sender.
	Protocol int `json:"protocol"`
}

// PeerMessage is one frame of the peer stream. Exactly one field is set.
// Removals of clusters are not replicated: they come from the config
// cluster, which every replica watches.
type PeerMessage struct {
	// Hello opens the stream each way; Peers sends and checks it itself.
	Hello *Hello `json:"hello,omitempty"`
	// Snapshot is the whole state of one cluster.
	Snapshot *ClusterSnapshot `json:"snapshot,omitempty"`
	// Delta changes one shard of one cluster.
	Delta *ShardDelta `json:"delta,omitempty"`
	// Resync asks the receiver for snapshots of these clusters.
	Resync []model.ClusterID `json:"resync,omitempty"`
	// Superseded answers a write the sender refused because it holds a
	// tombstone of the cluster (ErrRemoved): the cluster was removed at
	// that version, so a writer of a new incarnation must write above it.
	Superseded *ClusterTombstone `json:"superseded,omitempty"`
	// Trust is trust-bundle state, opaque here (owned by TrustBundle).
	Trust json.RawMessage `json:"trust,omitempty"`
	// ProxyStatus is a batch of the sender's proxy-status records, opaque
	// here (owned by the hub's proxy-status component).
	ProxyStatus json.RawMessage `json:"proxyStatus,omitempty"`
}

// ClusterTombstone is the version a cluster had when it was removed.
type ClusterTombstone struct {
	Cluster model.ClusterID `json:"cluster"`
	Version Version         `json:"version"`
}

// trustSet reports whether m carries trust state (JSON null counts as
// absent).
func (m *PeerMessage) trustSet() bool { return rawSet(m.Trust) }

// proxiesSet reports whether m carries proxy status.
func (m *PeerMessage) proxiesSet() bool { return rawSet(m.ProxyStatus) }

func rawSet(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// kind names the field that is set, for metrics and logs.
func (m *PeerMessage) kind() string {
	switch {
	case m.Hello != nil:
		return peerKindHello
	case m.Snapshot != nil:
		return peerKindSnapshot
	case m.Delta != nil:
		return peerKindDelta
	case len(m.Resync) > 0:
		return peerKindResync
	case m.Superseded != nil:
		return peerKindRemoved
	case m.proxiesSet():
		return peerKindProxies
	default:
		return peerKindTrust
	}
}

// Validate checks what the transport can check without knowing any state:
// exactly one field is set; a snapshot or delta names a valid cluster, has
// a version with a non-zero term and a valid owner (a delta also a Seq of
// at least 1, since Seq 0 is the term's snapshot), and its hostnames are
// DNS subdomains whose shards describe that same hostname with valid
// endpoint addresses; resync lists valid cluster IDs; trust is JSON; a
// Hello names a valid replica and a protocol. Sizes are bounded by the
// frame, MaxPeerFrameBytes. Errors wrap ErrMalformedMessage.
func (m *PeerMessage) Validate() error {
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrMalformedMessage)
	}
	n := 0
	for _, set := range []bool{m.Hello != nil, m.Snapshot != nil, m.Delta != nil, len(m.Resync) > 0, m.Superseded != nil, m.trustSet(), m.proxiesSet()} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("%w: %d fields set, want exactly one", ErrMalformedMessage, n)
	}
	var err error
	switch {
	case m.Hello != nil:
		err = validateHello(m.Hello)
	case m.Snapshot != nil:
		err = validateSnapshot(m.Snapshot)
	case m.Delta != nil:
		err = validateShardDelta(m.Delta)
	case len(m.Resync) > 0:
		for _, c := range m.Resync {
			if err = checkClusterID(c); err != nil {
				err = fmt.Errorf("resync: %w", err)
				break
			}
		}
	case m.Superseded != nil:
		if err = checkClusterID(m.Superseded.Cluster); err == nil {
			err = checkWriteVersion(m.Superseded.Version)
		}
		if err != nil {
			err = fmt.Errorf("superseded: %w", err)
		}
	case m.proxiesSet():
		if !json.Valid(m.ProxyStatus) {
			err = errors.New("proxy status: not valid JSON")
		}
	default:
		if !json.Valid(m.Trust) {
			err = errors.New("trust: not valid JSON")
		}
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMalformedMessage, err)
	}
	return nil
}

func validateHello(h *Hello) error {
	if err := checkReplicaID(h.Replica); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	if h.Protocol < 1 {
		return fmt.Errorf("hello: protocol %d", h.Protocol)
	}
	for c, v := range h.Digest {
		if err := checkClusterID(c); err != nil {
			return fmt.Errorf("hello digest: %w", err)
		}
		if !v.IsZero() {
			if err := checkWriteVersion(v); err != nil {
				return fmt.Errorf("hello digest of %s: %w", c, err)
			}
		}
	}
	return nil
}

func validateSnapshot(s *ClusterSnapshot) error {
	if err := checkClusterID(s.Cluster); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := checkWriteVersion(s.Version); err != nil {
		return fmt.Errorf("snapshot of %s: %w", s.Cluster, err)
	}
	for h, shard := range s.Shards {
		if shard == nil {
			return fmt.Errorf("snapshot of %s: hostname %q has no shard", s.Cluster, h)
		}
		if err := checkShard(h, shard); err != nil {
			return fmt.Errorf("snapshot of %s: %w", s.Cluster, err)
		}
	}
	return nil
}

func validateShardDelta(d *ShardDelta) error {
	if err := checkClusterID(d.Cluster); err != nil {
		return fmt.Errorf("delta: %w", err)
	}
	if err := checkWriteVersion(d.Version); err != nil {
		return fmt.Errorf("delta of %s: %w", d.Cluster, err)
	}
	if d.Version.Seq == 0 {
		return fmt.Errorf("delta of %s: seq 0 (the term's snapshot)", d.Cluster)
	}
	if d.Shard == nil {
		if errs := validation.IsDNS1123Subdomain(string(d.Hostname)); len(errs) > 0 {
			return fmt.Errorf("delta of %s: hostname %q: %s", d.Cluster, d.Hostname, errs[0])
		}
		return nil
	}
	if err := checkShard(d.Hostname, d.Shard); err != nil {
		return fmt.Errorf("delta of %s: %w", d.Cluster, err)
	}
	return nil
}

// checkWriteVersion checks the version of a write: a term and an owner.
func checkWriteVersion(v Version) error {
	if v.Term == 0 {
		return fmt.Errorf("version %v has term 0", v)
	}
	if err := checkReplicaID(v.Owner); err != nil {
		return fmt.Errorf("version %v: owner: %w", v, err)
	}
	return nil
}

func checkShard(h model.Hostname, s *model.ServiceShard) error {
	if errs := validation.IsDNS1123Subdomain(string(h)); len(errs) > 0 {
		return fmt.Errorf("hostname %q: %s", h, errs[0])
	}
	if s.Service == nil {
		return fmt.Errorf("shard of %s has no service", h)
	}
	if s.Service.Hostname != h {
		return fmt.Errorf("shard of %s describes service %q", h, s.Service.Hostname)
	}
	for i := range s.Endpoints {
		if !s.Endpoints[i].Address.IsValid() {
			return fmt.Errorf("shard of %s: endpoint %d has no address", h, i)
		}
	}
	return nil
}

// checkClusterID applies the rule of remote secrets (a Secret data key:
// letters, digits, '-', '_', '.', at most 253 characters).
func checkClusterID(c model.ClusterID) error {
	if errs := validation.IsConfigMapKey(string(c)); len(errs) > 0 {
		return fmt.Errorf("cluster ID %q: %s", c, errs[0])
	}
	return nil
}

// checkReplicaID checks that id can be a path segment of a SPIFFE ID:
// letters, digits, '.', '-', '_', not "." or "..", at most 253 bytes.
// Memberlist node names (host names) fit.
func checkReplicaID(id ReplicaID) error {
	if id == "" {
		return errors.New("replica ID is empty")
	}
	if len(id) > 253 {
		return fmt.Errorf("replica ID of %d bytes, more than 253", len(id))
	}
	if id == "." || id == ".." {
		return fmt.Errorf("replica ID %q", id)
	}
	for _, r := range string(id) {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return fmt.Errorf("replica ID %q: character %q is not a letter, digit, '.', '-' or '_'", id, r)
		}
	}
	return nil
}

// peerFrame is an encoded PeerMessage, ready to send to any number of
// peers: a broadcast is marshalled once.
type peerFrame struct {
	kind string
	data []byte
}

// encodePeerFrame validates and marshals m.
func encodePeerFrame(m *PeerMessage) (peerFrame, error) {
	data, err := EncodePeerMessage(m)
	if err != nil {
		return peerFrame{}, err
	}
	if len(data) > MaxPeerFrameBytes-peerFrameOverhead {
		return peerFrame{}, fmt.Errorf("%w: %s frame of %d bytes, more than %d", ErrMalformedMessage, m.kind(), len(data), MaxPeerFrameBytes-peerFrameOverhead)
	}
	return peerFrame{kind: m.kind(), data: data}, nil
}

// decodePeerFrame unmarshals and validates a received frame. On error it
// also returns the rejection reason.
func decodePeerFrame(data []byte) (*PeerMessage, string, error) {
	if len(data) > MaxPeerFrameBytes {
		return nil, peerRejectDecode, fmt.Errorf("%w: frame of %d bytes", ErrMalformedMessage, len(data))
	}
	var p peerpb.PeerMessage
	if err := proto.Unmarshal(data, &p); err != nil {
		return nil, peerRejectDecode, fmt.Errorf("%w: %w", ErrMalformedMessage, err)
	}
	m, err := fromProto(&p)
	if err != nil {
		return nil, peerRejectDecode, fmt.Errorf("%w: %w", ErrMalformedMessage, err)
	}
	if !m.trustSet() {
		m.Trust = nil
	}
	if !m.proxiesSet() {
		m.ProxyStatus = nil
	}
	if err := m.Validate(); err != nil {
		return nil, peerRejectInvalid, err
	}
	return m, "", nil
}
