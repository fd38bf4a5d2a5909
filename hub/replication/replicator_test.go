package replication

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/gossip"
	"github.com/meshfed/meshfed/federation/peerstream"
	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/testutil"
)

func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		out = append(out, l.Addr().String())
	}
	return out
}

type replica struct {
	r      *Replicator
	store  *store.Store
	trust  *Trust
	gossip string
	reg    *prometheus.Registry
}

// startReplica runs a Replicator over a real store, real memberlist and
// real mTLS peer streams on loopback.
func startReplica(t *testing.T, id federation.ReplicaID, ca *pki.CA, key []byte, join []string) *replica {
	t.Helper()
	return startReplicaWith(t, id, ca, key, join, 0)
}

// startReplicaWith is startReplica with a PeerConnectGrace (0: default).
func startReplicaWith(t *testing.T, id federation.ReplicaID, ca *pki.CA, key []byte, join []string, grace time.Duration) *replica {
	t.Helper()
	ports := freePorts(t, 2)
	cert, err := peerstream.PeerCertificate(ca, id, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	serverTLS, clientTLS := peerstream.PeerTLS(pool, cert)
	reg := prometheus.NewRegistry()
	log := testr.New(t).WithName(string(id))
	st := store.New(store.Options{Self: id})
	trust := NewTrust(id, nil, log, reg)
	r, err := New(Options{
		Self:       id,
		GossipAddr: ports[0], Join: join, GossipKey: key,
		PeerAddr: ports[1], ServerTLS: serverTLS, ClientTLS: clientTLS, PeerConnectGrace: grace,
		Log: log, Metrics: reg,
	}, Deps{Store: st, Trust: trust, Ownership: NewOwnership(id, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("replica %s: %v", id, err)
		}
	})
	return &replica{r: r, store: st, trust: trust, gossip: ports[0], reg: reg}
}

func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, testutil.Named(what, cond))
}

const echo = model.Hostname("echo.demo.svc.cluster.local")

func shards(addrs ...string) map[model.Hostname]*model.ServiceShard {
	s := &model.ServiceShard{Service: &model.Service{Hostname: echo, Name: "echo", Namespace: "demo",
		Ports: []model.ServicePort{{Name: "grpc", Port: 8080, Protocol: model.ProtocolGRPC}}}}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, model.Endpoint{Cluster: "c1", Address: netip.MustParseAddr(a), Ready: true,
			Ports: map[string]uint32{"grpc": 9000}})
	}
	return map[model.Hostname]*model.ServiceShard{echo: s}
}

// TestReplication: two replicas find each other, split ownership, and a
// write on one reaches the other's store; the trust bundle replicates by
// union and a removed root stays removed against a late message.
func TestReplication(t *testing.T) {
	ca, err := pki.NewCA("test peer CA", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	a := startReplica(t, "a", ca, key, nil)
	b := startReplica(t, "b", ca, key, []string{a.gossip})

	waitFor(t, "members", func() error {
		for _, x := range []*replica{a, b} {
			if n := len(x.r.Federationz().Members); n != 2 {
				return fmt.Errorf("%s sees %d members", x.r.opts.Self, n)
			}
		}
		return nil
	})
	// Exactly one of them owns any cluster, once each has taken the new
	// member into its ownership: memberlist lists a member before the
	// replica's members goroutine hands it to Ownership, so right after
	// both see two members one of them may still own everything.
	waitFor(t, "ownership split", func() error {
		for i := range 20 {
			c := model.ClusterID(fmt.Sprintf("c%d", i))
			if a.r.Ownership().Owns(c) == b.r.Ownership().Owns(c) {
				return fmt.Errorf("cluster %s: a owns=%v b owns=%v", c, a.r.Ownership().Owns(c), b.r.Ownership().Owns(c))
			}
		}
		return nil
	})

	gen := a.store.NextGeneration("c1")
	if err := a.store.ReplaceCluster("c1", gen, shards("10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	if err := a.store.UpdateShard("c1", gen, echo, shards("10.0.0.1", "10.0.0.2")[echo]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "state replicated", func() error {
		ms := b.store.Service(echo)
		if ms == nil || len(ms.Endpoints) != 2 {
			return fmt.Errorf("b has %+v", ms)
		}
		if v, _ := b.store.Version("c1"); v.Owner != "a" || v.Seq != 1 {
			return fmt.Errorf("b has version %v", v)
		}
		return nil
	})

	roots, err := federation.ParseRootPEM(ca.CertPEM, "cluster.local", "a", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	root := roots[0]
	if !a.trust.AddRoot(root) {
		t.Fatal("AddRoot refused")
	}
	waitFor(t, "root replicated", func() error {
		if got := b.trust.TrustRoots(); len(got) != 1 || got[0].Fingerprint != root.Fingerprint {
			return fmt.Errorf("b roots %+v", got)
		}
		return nil
	})
	stale, _ := json.Marshal(federation.TrustBundleState{Roots: []federation.Root{root}})
	if !b.trust.RemoveRoot(root.Fingerprint) {
		t.Fatal("RemoveRoot refused")
	}
	waitFor(t, "removal replicated", func() error {
		if got := a.trust.TrustRoots(); len(got) != 0 {
			return fmt.Errorf("a roots %+v", got)
		}
		return nil
	})
	// A late copy of the old bundle does not resurrect the root.
	b.trust.Receive("a", &federation.PeerMessage{Trust: stale})
	if got := b.trust.TrustRoots(); len(got) != 0 {
		t.Fatalf("late message resurrected %+v", got)
	}

	// A forged delta (a writer that does not hold the cluster) changes
	// nothing and is counted as refused.
	b.r.clusters.Receive("a", &federation.PeerMessage{Delta: &federation.ShardDelta{
		Cluster: "c1", Hostname: echo, Version: federation.Version{Term: uint64(gen), Seq: 9, Owner: "mallory"},
	}})
	if ms := b.store.Service(echo); ms == nil || len(ms.Endpoints) != 2 {
		t.Fatalf("forged delta changed state: %+v", ms)
	}
}

// gauge reads a gauge of reg, the one whose labels include want.
func gauge(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
					continue metrics
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s %v", name, want)
	return 0
}

// A retirement replicates like an add; at its time every replica drops the
// root by itself and signals TrustChanged (so streams send the smaller
// bundle); the bundle's metrics follow.
func TestTrustRetirement(t *testing.T) {
	ca, err := pki.NewCA("peer ca", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a := startReplica(t, "a", ca, nil, nil)
	b := startReplica(t, "b", ca, nil, []string{a.gossip})
	var fps []string
	for i, validity := range []time.Duration{time.Hour, 2 * time.Hour} {
		root, err := pki.NewCA(fmt.Sprintf("root %d", i), validity, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := federation.ParseRootPEM(root.CertPEM, "cluster.local", "a", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		a.trust.AddRoot(parsed[0])
		fps = append(fps, parsed[0].Fingerprint)
	}
	waitFor(t, "both roots on b", func() error {
		if n := len(b.trust.TrustRoots()); n != 2 {
			return fmt.Errorf("%d roots", n)
		}
		return nil
	})
	retireAt := time.Now().Add(time.Second)
	if !a.trust.RetireRoot(fps[0], retireAt) {
		t.Fatal("RetireRoot changed nothing")
	}
	waitFor(t, "the retirement on b", func() error {
		for _, r := range b.trust.TrustRoots() {
			if r.Fingerprint == fps[0] && r.RetireAt.Equal(retireAt.UTC()) {
				return nil
			}
		}
		return fmt.Errorf("roots %v", b.trust.TrustRoots())
	})
	if got := gauge(t, b.reg, "meshfed_trust_bundle_roots", map[string]string{"state": "retiring"}); got != 1 {
		t.Fatalf("retiring roots = %v", got)
	}
	first := gauge(t, b.reg, "meshfed_trust_bundle_first_expiry_timestamp_seconds", nil)
	if want := float64(time.Now().Add(time.Hour).Unix()); first < want-120 || first > want+120 {
		t.Fatalf("first expiry %v, want about %v (the one-hour root)", first, want)
	}
	for len(b.trust.TrustChanged()) > 0 {
		<-b.trust.TrustChanged()
	}
	select {
	case <-b.trust.TrustChanged():
	case <-time.After(10 * time.Second):
		t.Fatal("b did not signal the retirement when it came")
	}
	for _, rep := range []*replica{a, b} {
		waitFor(t, "the retired root gone", func() error {
			if roots := rep.trust.TrustRoots(); len(roots) != 1 || roots[0].Fingerprint != fps[1] {
				return fmt.Errorf("roots %v", roots)
			}
			return nil
		})
		if got := gauge(t, rep.reg, "meshfed_trust_bundle_roots", map[string]string{"state": "active"}); got != 1 {
			t.Fatalf("active roots = %v", got)
		}
	}
}

// A gossip member that never opens a peer stream (here a memberlist node
// whose peer address nobody serves, as a replica that died before this one
// joined) is set aside as suspect after PeerConnectGrace; a connected
// member is not.
func TestUnconnectedMemberIsSuspect(t *testing.T) {
	ca, err := pki.NewCA("peer ca", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a := startReplicaWith(t, "a", ca, nil, nil, 300*time.Millisecond)
	b := startReplicaWith(t, "b", ca, nil, []string{a.gossip}, 300*time.Millisecond)
	ports := freePorts(t, 2)
	ghost, err := gossip.NewMembership(gossip.MembershipOptions{
		ReplicaID: "c-ghost", BindAddr: ports[0], Join: []string{a.gossip}, PeerAddr: ports[1],
		Log: testr.New(t).WithName("ghost"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ghost.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for _, rep := range []*replica{a, b} {
		waitFor(t, "the ghost set aside", func() error {
			fz := rep.r.Federationz()
			if len(fz.Members) != 3 {
				return fmt.Errorf("members %v", fz.Members)
			}
			if !slices.Equal(fz.Suspects, []string{"c-ghost"}) {
				return fmt.Errorf("suspects %v, want [c-ghost]", fz.Suspects)
			}
			return nil
		})
	}
}

// A replica that (re)connects is sent a cluster's snapshot by the
// cluster's writer only, while the writer is connected: every replica holds
// the same snapshots, and a joiner would otherwise get each one from every
// peer at once and drop all but one.
func TestCatchUpFromTheWriter(t *testing.T) {
	ca, err := pki.NewCA("peer ca", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a := startReplica(t, "a", ca, nil, nil)
	b := startReplica(t, "b", ca, nil, []string{a.gossip})
	clusters := []model.ClusterID{"c1", "c2", "c3"}
	for _, c := range clusters {
		if err := a.store.ReplaceCluster(c, a.store.NextGeneration(c), shards("10.0.0.1")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "b holds a's clusters", func() error {
		if n := len(b.store.Digest()); n != len(clusters) {
			return fmt.Errorf("%d clusters", n)
		}
		return nil
	})
	if got := a.r.clusters.catchUp("joiner", clusters); !slices.Equal(got, clusters) {
		t.Fatalf("the writer sends %v, want every cluster it wrote", got)
	}
	if got := b.r.clusters.catchUp("joiner", clusters); len(got) != 0 {
		t.Fatalf("b sends %v while the writer a is connected, want none", got)
	}
	// The writer gone: b sends them.
	a.r.peers.SetPeers(nil)
	b.r.peers.SetPeers(nil)
	waitFor(t, "a and b disconnected", func() error {
		if c := b.r.peers.Connected(); len(c) != 0 {
			return fmt.Errorf("b still connected to %v", c)
		}
		return nil
	})
	if got := b.r.clusters.catchUp("joiner", clusters); !slices.Equal(got, clusters) {
		t.Fatalf("b sends %v with the writer gone, want every cluster", got)
	}
}

// TestTombstoneAnswered: a cluster removed and added again is written by a
// replica that never saw its first incarnation. The replica holding the
// tombstone refuses the write and tells the writer, which republishes
// above the tombstone; the state arrives without any clock involved.
func TestTombstoneAnswered(t *testing.T) {
	ca, err := pki.NewCA("test peer CA", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	a := startReplica(t, "a", ca, key, nil)
	// a held c1 at a high term (many handovers) and saw it removed.
	for range 5 {
		gen := a.store.NextGeneration("c1")
		if err := a.store.ReplaceCluster("c1", gen, shards("10.0.0.1")); err != nil {
			t.Fatal(err)
		}
	}
	a.store.RemoveCluster("c1")
	tomb, ok := a.store.Tombstone("c1")
	if !ok || tomb.Term < 5 {
		t.Fatalf("tombstone %v %v", tomb, ok)
	}

	// b joins later and writes c1's new incarnation from term 1.
	b := startReplica(t, "b", ca, key, []string{a.gossip})
	waitFor(t, "peer stream", func() error {
		if len(b.r.peers.Connected()) != 1 {
			return fmt.Errorf("b connected to %v", b.r.peers.Connected())
		}
		return nil
	})
	gen := b.store.NextGeneration("c1")
	if err := b.store.ReplaceCluster("c1", gen, shards("10.0.0.7")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "re-added cluster replicated", func() error {
		v, ok := a.store.Version("c1")
		if !ok || v.Owner != "b" || v.Term <= tomb.Term {
			return fmt.Errorf("a holds %v (%v), want b's above %v", v, ok, tomb)
		}
		if ms := a.store.Service(echo); ms == nil || len(ms.Endpoints) != 1 || ms.Endpoints[0].Address.String() != "10.0.0.7" {
			return fmt.Errorf("a's view %+v", ms)
		}
		return nil
	})
}
