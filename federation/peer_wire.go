package federation

// The wire format of the peer stream: frames, messages and their checks.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshfed/meshfed/pkg/model"
)

// Errors of the wire format.
var (
	// ErrMalformedMessage means a PeerMessage breaks the rules of
	// PeerMessage.Validate, or a frame is not the encoding of one. The
	// wrapping error says what is wrong.
	ErrMalformedMessage = errors.New("federation: malformed peer message")
	// ErrUndecodable means a frame is not the protobuf of a PeerMessage
	// at all; it also wraps ErrMalformedMessage.
	ErrUndecodable = errors.New("federation: undecodable peer frame")
)

// PeerProtocol is the version of the frames this replica speaks. A peer
// whose Hello names another version is refused. Add fields freely (unknown
// fields are ignored); bump the version only for a change an older replica
// would misread. Version 2: frames are protobuf (federation/peerpb), no
// longer JSON; a version-1 replica's frames are refused as undecodable.
const PeerProtocol = 2

// Kinds of PeerMessage (Kind), one per field: the "kind" label of the peer
// stream's metrics and the key its handlers register under.
const (
	KindHello       = "hello"
	KindSnapshot    = "snapshot"
	KindDelta       = "delta"
	KindResync      = "resync"
	KindSuperseded  = "superseded"
	KindTrust       = "trust"
	KindProxyStatus = "proxy_status"
)

// PeerKinds lists every kind of PeerMessage.
func PeerKinds() []string {
	return []string{KindHello, KindSnapshot, KindDelta, KindResync, KindSuperseded, KindTrust, KindProxyStatus}
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
	// here (owned by hub/fleetstatus, which encodes a fleetpb.Batch).
	ProxyStatus []byte `json:"proxyStatus,omitempty"`
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
func (m *PeerMessage) proxiesSet() bool { return len(m.ProxyStatus) > 0 }

func rawSet(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// Kind names the field that is set (one of PeerKinds).
func (m *PeerMessage) Kind() string {
	switch {
	case m.Hello != nil:
		return KindHello
	case m.Snapshot != nil:
		return KindSnapshot
	case m.Delta != nil:
		return KindDelta
	case len(m.Resync) > 0:
		return KindResync
	case m.Superseded != nil:
		return KindSuperseded
	case m.proxiesSet():
		return KindProxyStatus
	default:
		return KindTrust
	}
}

// Validate checks what the transport can check without knowing any state:
// exactly one field is set; a snapshot or delta names a valid cluster, has
// a version with a non-zero term and a valid owner (a delta also a Seq of
// at least 1, since Seq 0 is the term's snapshot), and its hostnames are
// DNS subdomains whose shards describe that same hostname with valid
// endpoint addresses; resync lists valid cluster IDs; trust is JSON; a
// Hello names a valid replica and a protocol. Sizes are bounded by the
// frame the transport accepts. Errors wrap ErrMalformedMessage.
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
		// Opaque here: its owner decodes and checks it.
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
	if err := h.Replica.Validate(); err != nil {
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
	if err := v.Owner.Validate(); err != nil {
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

// Validate checks that id can be a path segment of a SPIFFE ID: letters,
// digits, '.', '-', '_', not "." or "..", at most 253 bytes. Memberlist
// node names (host names) fit.
func (id ReplicaID) Validate() error {
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
