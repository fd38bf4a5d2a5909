package peerstream_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/peerpb"
	"github.com/meshfed/meshfed/federation/peerstream"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// The peer tests run real gRPC over 127.0.0.1 with mutual TLS from
// pkg/pki. Waits are bounded polls, never bare sleeps.

const peerWait = 20 * time.Second

var peerNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// peerEventually polls cond until it holds or peerWait passes.
func peerEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, peerWait, 10*time.Millisecond, testutil.Holds(what, cond))
}

const peerHost = model.Hostname("web.default.svc.cluster.local")

func peerShard() *model.ServiceShard {
	return &model.ServiceShard{
		Service: &model.Service{Hostname: peerHost, Name: "web", Namespace: "default",
			Ports: []model.ServicePort{{Name: "grpc", Port: 8080, Protocol: model.ProtocolGRPC}}},
		Endpoints: []model.Endpoint{{Cluster: "c1", Address: netip.MustParseAddr("10.0.0.1"), Ready: true, Ports: map[string]uint32{"grpc": 8080}}},
	}
}

// peerCluster is the cluster each test replica owns, named after it.
func peerCluster(id federation.ReplicaID) model.ClusterID { return model.ClusterID("c-" + string(id)) }

func peerSnapshot(owner federation.ReplicaID) *federation.ClusterSnapshot {
	return &federation.ClusterSnapshot{
		Cluster: peerCluster(owner),
		Version: federation.Version{Term: 1, Owner: owner},
		Shards:  map[model.Hostname]*model.ServiceShard{peerHost: peerShard()},
		Sent:    peerNow,
	}
}

func peerDelta(owner federation.ReplicaID, seq uint64) *federation.ShardDelta {
	return &federation.ShardDelta{
		Cluster: peerCluster(owner), Version: federation.Version{Term: 1, Seq: seq, Owner: owner},
		Hostname: peerHost, Shard: peerShard(), Sent: peerNow,
	}
}

// peerRecorder is a PeerHandler that records everything and answers each
// Hello with a snapshot of its own cluster.
type peerRecorder struct {
	self federation.ReplicaID

	mu     sync.Mutex // guards the fields below
	hellos map[federation.ReplicaID][]federation.Digest
	msgs   map[federation.ReplicaID][]*federation.PeerMessage
	downs  map[federation.ReplicaID]int
}

func newPeerRecorder(self federation.ReplicaID) *peerRecorder {
	return &peerRecorder{
		self:   self,
		hellos: map[federation.ReplicaID][]federation.Digest{},
		msgs:   map[federation.ReplicaID][]*federation.PeerMessage{},
		downs:  map[federation.ReplicaID]int{},
	}
}

func (r *peerRecorder) PeerHello(from federation.ReplicaID, h *federation.Hello) []*federation.PeerMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hellos[from] = append(r.hellos[from], h.Digest)
	return []*federation.PeerMessage{{Snapshot: peerSnapshot(r.self)}}
}

func (r *peerRecorder) PeerMessage(from federation.ReplicaID, m *federation.PeerMessage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs[from] = append(r.msgs[from], m)
}

func (r *peerRecorder) down(id federation.ReplicaID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.downs[id]++
}

func (r *peerRecorder) helloCount(from federation.ReplicaID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.hellos[from])
}

func (r *peerRecorder) totalHellos() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, h := range r.hellos {
		n += len(h)
	}
	return n
}

func (r *peerRecorder) lastHello(from federation.ReplicaID) federation.Digest {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.hellos[from]
	if len(h) == 0 {
		return nil
	}
	return h[len(h)-1]
}

func (r *peerRecorder) downCount(id federation.ReplicaID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.downs[id]
}

// received returns the messages from a peer that match.
func (r *peerRecorder) received(from federation.ReplicaID, match func(*federation.PeerMessage) bool) []*federation.PeerMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*federation.PeerMessage
	for _, m := range r.msgs[from] {
		if match(m) {
			out = append(out, m)
		}
	}
	return out
}

func (r *peerRecorder) all(from federation.ReplicaID) []*federation.PeerMessage {
	return r.received(from, func(*federation.PeerMessage) bool { return true })
}

func isSnapshotOf(c model.ClusterID) func(*federation.PeerMessage) bool {
	return func(m *federation.PeerMessage) bool { return m.Snapshot != nil && m.Snapshot.Cluster == c }
}

// peerLog captures log lines, to find evidence of refusals.
type peerLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *peerLog) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 1})
}

func (l *peerLog) contains(substrs ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		ok := true
		for _, s := range substrs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			return true
		}
	}
	return false
}

func (l *peerLog) dump(t *testing.T, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		t.Logf("%s: %s", name, line)
	}
}

// peerNode is one replica's transport.
type peerNode struct {
	id     federation.ReplicaID
	peers  *peerstream.Peers
	rec    *peerRecorder
	reg    *prometheus.Registry
	log    *peerLog
	addr   string
	cancel context.CancelFunc
	done   chan error
}

// peerFleet is a set of replicas sharing one peer CA.
type peerFleet struct {
	t     *testing.T
	ca    *pki.CA
	nodes map[federation.ReplicaID]*peerNode
}

func newPeerFleet(t *testing.T) *peerFleet {
	// Real TLS handshakes check validity against the wall clock.
	ca, err := pki.NewCA("meshfed peer CA", 24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &peerFleet{t: t, ca: ca, nodes: map[federation.ReplicaID]*peerNode{}}
}

func (f *peerFleet) tlsFor(id federation.ReplicaID) (server, client *tls.Config) {
	f.t.Helper()
	return peerTLSFrom(f.t, f.ca, id)
}

func peerTLSFrom(t *testing.T, ca *pki.CA, id federation.ReplicaID) (server, client *tls.Config) {
	t.Helper()
	cert, err := peerstream.PeerCertificate(ca, id, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return peerstream.PeerTLS(pool, cert)
}

// start runs replica id listening on listen (127.0.0.1:0 when empty).
func (f *peerFleet) start(id federation.ReplicaID, listen string, edit ...func(*peerstream.PeerOptions)) *peerNode {
	t := f.t
	t.Helper()
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	server, client := f.tlsFor(id)
	n := &peerNode{id: id, rec: newPeerRecorder(id), reg: prometheus.NewRegistry(), log: &peerLog{}, done: make(chan error, 1)}
	opts := peerstream.PeerOptions{
		Self: id, ListenAddr: listen, TLS: server, ClientTLS: client,
		Handler:      n.rec,
		OnPeerDown:   n.rec.down,
		LocalDigest:  func() federation.Digest { return federation.Digest{peerCluster(id): {Term: 1, Owner: id}} },
		Log:          n.log.logger(),
		Metrics:      n.reg,
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 500 * time.Millisecond,
	}
	for _, e := range edit {
		e(&opts)
	}
	p, err := peerstream.NewPeers(opts)
	if err != nil {
		t.Fatal(err)
	}
	n.peers = p
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- p.Run(ctx) }()
	addr := p.Addr()
	if addr == nil {
		t.Fatalf("%s did not bind %s: %v", id, listen, <-n.done)
	}
	n.addr = addr.String()
	f.nodes[id] = n
	t.Cleanup(func() {
		n.stop(t)
		if t.Failed() {
			n.log.dump(t, string(id))
		}
	})
	return n
}

// stop ends the replica's Run and waits for it.
func (n *peerNode) stop(t *testing.T) {
	t.Helper()
	if n.cancel == nil {
		return
	}
	n.cancel()
	n.cancel = nil
	select {
	case err := <-n.done:
		if err != nil {
			t.Errorf("%s: Run: %v", n.id, err)
		}
	case <-time.After(peerWait):
		t.Fatalf("%s: Run did not return", n.id)
	}
}

// connectAll gives every running replica the addresses of all the others.
func (f *peerFleet) connectAll() {
	addrs := map[federation.ReplicaID]string{}
	for id, n := range f.nodes {
		if n.cancel != nil {
			addrs[id] = n.addr
		}
	}
	for _, n := range f.nodes {
		if n.cancel != nil {
			n.peers.SetPeers(addrs)
		}
	}
}

func (n *peerNode) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
				}
				if !found {
					continue metrics
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

func (n *peerNode) rejected(t *testing.T, reason string) float64 {
	t.Helper()
	return n.metric(t, "meshfed_federation_peer_messages_rejected_total", "reason", reason)
}

func (n *peerNode) connectedTo(ids ...federation.ReplicaID) func() bool {
	return func() bool { return slices.Equal(n.peers.Connected(), ids) }
}

func TestPeerMeshHelloCatchUpBroadcast(t *testing.T) {
	f := newPeerFleet(t)
	// Replica a loads its TLS from files, as --peer-tls-* would.
	dir := t.TempDir()
	certPEM, keyPEM, err := f.ca.Issue(pki.IssueOptions{
		CommonName: "a", URIs: []*url.URL{peerstream.ReplicaURI("example.org", "a")},
		Validity: time.Hour, Server: true, Client: true, Now: time.Now(),
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": f.ca.CertPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	serverA, clientA, err := peerstream.LoadPeerTLS(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	a := f.start("a", "", func(o *peerstream.PeerOptions) { o.TLS, o.ClientTLS = serverA, clientA })
	b := f.start("b", "")
	c := f.start("c", "")
	f.connectAll()

	peerEventually(t, "a full mesh", func() bool {
		return a.connectedTo("b", "c")() && b.connectedTo("a", "c")() && c.connectedTo("a", "b")()
	})
	nodes := []*peerNode{a, b, c}
	for _, n := range nodes {
		for _, o := range nodes {
			if o == n {
				continue
			}
			peerEventually(t, fmt.Sprintf("%s to get %s's hello and catch-up snapshot", n.id, o.id), func() bool {
				return n.rec.helloCount(o.id) > 0 && len(n.rec.received(o.id, isSnapshotOf(peerCluster(o.id)))) == 1
			})
			want := federation.Digest{peerCluster(o.id): {Term: 1, Owner: o.id}}
			if got := n.rec.lastHello(o.id); len(got) != 1 || got[peerCluster(o.id)] != want[peerCluster(o.id)] {
				t.Errorf("%s got digest %v from %s, want %v", n.id, got, o.id, want)
			}
		}
		if got := n.metric(t, "meshfed_federation_peers_connected"); got != 2 {
			t.Errorf("%s: peers_connected = %v, want 2", n.id, got)
		}
		if got := n.metric(t, "meshfed_federation_peer_messages_total", "direction", "received", "kind", "hello"); got != 2 {
			t.Errorf("%s: hellos received = %v, want 2 (one stream per pair)", n.id, got)
		}
	}

	// Broadcast reaches every peer, whichever side dialed.
	if err := b.peers.Broadcast(&federation.PeerMessage{Delta: peerDelta("b", 1)}); err != nil {
		t.Fatal(err)
	}
	isDelta := func(m *federation.PeerMessage) bool { return m.Delta != nil && m.Delta.Version.Seq == 1 }
	for _, n := range []*peerNode{a, c} {
		peerEventually(t, n.id.String()+" to get b's delta", func() bool { return len(n.rec.received("b", isDelta)) == 1 })
	}
	if got := b.metric(t, "meshfed_federation_peer_messages_total", "direction", "sent", "kind", "delta"); got != 2 {
		t.Errorf("b: deltas sent = %v, want 2", got)
	}

	// Send reaches one peer, in either direction of the pair's stream.
	if err := c.peers.Send("a", &federation.PeerMessage{Resync: []model.ClusterID{"c-a"}}); err != nil {
		t.Fatal(err)
	}
	if err := a.peers.Send("c", &federation.PeerMessage{Trust: json.RawMessage(`{"roots":["x"]}`)}); err != nil {
		t.Fatal(err)
	}
	peerEventually(t, "a to get c's resync and c a's trust", func() bool {
		return len(a.rec.received("c", func(m *federation.PeerMessage) bool { return len(m.Resync) == 1 })) == 1 &&
			len(c.rec.received("a", func(m *federation.PeerMessage) bool { return string(m.Trust) == `{"roots":["x"]}` })) == 1
	})

	if err := a.peers.Send("nobody", &federation.PeerMessage{Resync: []model.ClusterID{"x"}}); !errors.Is(err, peerstream.ErrPeerNotConnected) {
		t.Errorf("Send to an unknown peer: %v, want ErrPeerNotConnected", err)
	}
	if err := a.peers.Broadcast(&federation.PeerMessage{Delta: &federation.ShardDelta{Cluster: "c-a", Hostname: peerHost}}); !errors.Is(err, federation.ErrMalformedMessage) {
		t.Errorf("Broadcast of a delta without version: %v, want ErrMalformedMessage", err)
	}
	if err := a.peers.Send("b", &federation.PeerMessage{Hello: &federation.Hello{Replica: "a", Protocol: 1}}); !errors.Is(err, federation.ErrMalformedMessage) {
		t.Errorf("Send of a Hello: %v, want ErrMalformedMessage", err)
	}
}

func TestPeerRestartReconnectsAndDownFires(t *testing.T) {
	f := newPeerFleet(t)
	a, b, c := f.start("a", ""), f.start("b", ""), f.start("c", "")
	f.connectAll()
	peerEventually(t, "a full mesh", func() bool {
		return a.connectedTo("b", "c")() && b.connectedTo("a", "c")() && c.connectedTo("a", "b")()
	})

	// c (dialed by a and b) dies: both notice through their outbound
	// streams, long before gossip would.
	cAddr := c.addr
	c.stop(t)
	for _, n := range []*peerNode{a, b} {
		peerEventually(t, n.id.String()+" to see c down", func() bool {
			return n.rec.downCount("c") == 1 && !slices.Contains(n.peers.Connected(), "c")
		})
		if got := n.metric(t, "meshfed_federation_peers_connected"); got != 1 {
			t.Errorf("%s: peers_connected = %v after c died, want 1", n.id, got)
		}
	}

	// c restarts on the same address: a and b redial it on their own, and
	// everyone gets a Hello again.
	c2 := f.start("c", cAddr)
	f.connectAll()
	peerEventually(t, "c to rejoin the mesh", func() bool {
		return a.connectedTo("b", "c")() && b.connectedTo("a", "c")() && c2.connectedTo("a", "b")()
	})
	for _, n := range []*peerNode{a, b} {
		peerEventually(t, n.id.String()+" to get the new c's hello and snapshot", func() bool {
			return n.rec.helloCount("c") == 2 && len(n.rec.received("c", isSnapshotOf("c-c"))) == 2
		})
		peerEventually(t, "the new c to get "+n.id.String()+"'s hello", func() bool { return c2.rec.helloCount(n.id) == 1 })
	}

	// a (which dials the others) dies: b and c notice on their inbound
	// streams.
	a.stop(t)
	for _, n := range []*peerNode{b, c2} {
		peerEventually(t, n.id.String()+" to see a down", func() bool {
			return n.rec.downCount("a") == 1 && n.connectedTo(n.otherThan("a", b.id, c2.id)...)()
		})
	}
}

func (n *peerNode) otherThan(gone federation.ReplicaID, all ...federation.ReplicaID) []federation.ReplicaID {
	var out []federation.ReplicaID
	for _, id := range all {
		if id != gone && id != n.id {
			out = append(out, id)
		}
	}
	return out
}

func TestPeerSetPeersRemovesAndRedials(t *testing.T) {
	f := newPeerFleet(t)
	a, b := f.start("a", ""), f.start("b", "")
	f.connectAll()
	peerEventually(t, "a and b connected", func() bool { return a.connectedTo("b")() && b.connectedTo("a")() })

	// Membership drops b: a closes the stream, and both see it go.
	a.peers.SetPeers(map[federation.ReplicaID]string{})
	peerEventually(t, "the stream to close", func() bool {
		return len(a.peers.Connected()) == 0 && len(b.peers.Connected()) == 0 && b.rec.downCount("a") == 1
	})
	// b comes back: a dials it again.
	f.connectAll()
	peerEventually(t, "a and b reconnected", func() bool { return a.connectedTo("b")() && b.rec.helloCount("a") == 2 })
}

// peerRaw is a hand-driven client of the Sync method, for what a Peers
// would never send.
type peerRaw struct {
	t      *testing.T
	stream grpc.ClientStream
}

func dialPeerRaw(t *testing.T, addr string, clientTLS *tls.Config) *peerRaw {
	t.Helper()
	r, err := openPeerRaw(t, addr, clientTLS)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// openPeerRaw opens the stream; the error is the server's refusal, if it
// comes that early.
func openPeerRaw(t *testing.T, addr string, clientTLS *tls.Config) (*peerRaw, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), peerWait)
	t.Cleanup(func() {
		cancel()
		_ = conn.Close()
	})
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{StreamName: "Sync", ServerStreams: true, ClientStreams: true}, "/meshfed.federation.v1.Peer/Sync")
	if err != nil {
		return nil, err
	}
	return &peerRaw{t: t, stream: s}, nil
}

func (r *peerRaw) sendRaw(data string) error {
	return r.stream.SendMsg(&wrapperspb.BytesValue{Value: []byte(data)})
}

func (r *peerRaw) send(m *federation.PeerMessage) {
	r.t.Helper()
	data, err := federation.EncodePeerMessage(m)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.sendRaw(string(data)); err != nil {
		r.t.Fatal(err)
	}
}

func (r *peerRaw) recv() (*federation.PeerMessage, error) {
	var in wrapperspb.BytesValue
	if err := r.stream.RecvMsg(&in); err != nil {
		return nil, err
	}
	return federation.DecodePeerMessage(in.Value)
}

// rawFrame encodes p as is, without the checks EncodePeerMessage makes.
func rawFrame(t *testing.T, p *peerpb.PeerMessage) string {
	t.Helper()
	data, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestPeerRefusesCertificateFromAnotherCA(t *testing.T) {
	f := newPeerFleet(t)
	b := f.start("b", "")

	other, err := pki.NewCA("impostor CA", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// A client whose certificate names replica a, from the wrong CA, but
	// which trusts b's CA: the server refuses it in the handshake.
	cert, err := peerstream.PeerCertificate(other, "a", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(f.ca.Cert)
	_, client := peerstream.PeerTLS(pool, cert)
	// The refusal shows at NewStream, SendMsg or RecvMsg, depending on
	// when the server's alert arrives.
	raw, err := openPeerRaw(t, b.addr, client)
	if err == nil {
		_ = raw.sendRaw(`{"hello":{"replica":"a","protocol":1}}`) // the error shows in recv
		var m *federation.PeerMessage
		if m, err = raw.recv(); err == nil {
			t.Fatalf("untrusted client got a frame: %+v", m)
		}
	}
	if code := status.Code(err); code != codes.Unavailable {
		t.Errorf("untrusted client: %v, want Unavailable (handshake refused)", err)
	}
	if n := b.rec.totalHellos(); n != 0 || len(b.peers.Connected()) != 0 {
		t.Errorf("handler saw %d hellos, connected %v", n, b.peers.Connected())
	}

	// A replica of the right CA that dials an address where another
	// replica answers refuses it in the handshake: it dialed b, the server
	// is c.
	c := f.start("c", "")
	a := f.start("a", "")
	a.peers.SetPeers(map[federation.ReplicaID]string{"b": c.addr, "c": c.addr})
	peerEventually(t, "a to refuse c posing as b", func() bool {
		return a.log.contains("redialing", `"peer"="b"`, "authentication handshake failed", "dialed replica", "server is")
	})
	peerEventually(t, "a to connect to the real c", a.connectedTo("c"))
	if got := c.rec.helloCount("a"); got != 1 {
		t.Errorf("c got %d hellos from a, want 1 (the stream dialed as b never opened)", got)
	}
}

func TestPeerRefusesBadHello(t *testing.T) {
	f := newPeerFleet(t)
	b := f.start("b", "")
	hello := func(replica federation.ReplicaID, protocol int32) string {
		return rawFrame(t, &peerpb.PeerMessage{Body: &peerpb.PeerMessage_Hello{Hello: &peerpb.Hello{
			Replica: string(replica), Protocol: protocol}}})
	}
	p := int32(federation.PeerProtocol)
	for _, tc := range []struct {
		name   string
		certID federation.ReplicaID
		first  string
		code   codes.Code
		reason string
	}{
		{"hello claims another replica", "a", hello("x", p), codes.PermissionDenied, "identity"},
		{"hello claims the server itself", "a", hello("b", p), codes.PermissionDenied, "identity"},
		{"higher ID dials lower", "z", hello("z", p), codes.FailedPrecondition, "direction"},
		{"first frame not a hello", "a", rawFrame(t, &peerpb.PeerMessage{Body: &peerpb.PeerMessage_Resync{
			Resync: &peerpb.Resync{Clusters: []string{"c1"}}}}), codes.InvalidArgument, "no_hello"},
		{"future protocol", "a", hello("a", p+1), codes.InvalidArgument, "protocol"},
		{"hello not protobuf", "a", hello("a", p)[:3], codes.InvalidArgument, "decode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.rejected(t, tc.reason)
			_, client := f.tlsFor(tc.certID)
			raw := dialPeerRaw(t, b.addr, client)
			if err := raw.sendRaw(tc.first); err != nil {
				t.Fatal(err)
			}
			m, err := raw.recv()
			if err == nil {
				t.Fatalf("got a frame: %+v", m)
			}
			if status.Code(err) != tc.code {
				t.Errorf("stream ended with %v, want %v", err, tc.code)
			}
			if got := b.rejected(t, tc.reason) - before; got != 1 {
				t.Errorf("rejected{reason=%q} grew by %v, want 1", tc.reason, got)
			}
			if n := b.rec.totalHellos(); n != 0 || len(b.peers.Connected()) != 0 {
				t.Errorf("handler saw %d hellos, connected %v", n, b.peers.Connected())
			}
		})
	}
}

// TestPeerMalformedFramesDropped: a bad frame after the Hello is counted
// and dropped; the handler never sees it, and the stream goes on working
// both ways.
func TestPeerMalformedFramesDropped(t *testing.T) {
	f := newPeerFleet(t)
	b := f.start("b", "")
	_, client := f.tlsFor("a")
	raw := dialPeerRaw(t, b.addr, client)
	raw.send(&federation.PeerMessage{Hello: &federation.Hello{Replica: "a", Protocol: federation.PeerProtocol}})
	for _, want := range []func(*federation.PeerMessage) bool{
		func(m *federation.PeerMessage) bool {
			return m.Hello != nil && m.Hello.Replica == "b" && m.Hello.Digest["c-b"].Term == 1
		},
		isSnapshotOf("c-b"),
	} {
		m, err := raw.recv()
		if err != nil {
			t.Fatal(err)
		}
		if !want(m) {
			t.Fatalf("unexpected frame %+v", m)
		}
	}
	peerEventually(t, "b to connect a", b.connectedTo("a"))

	for _, bad := range []string{
		"\xff\xff\xff not protobuf",
		rawFrame(t, &peerpb.PeerMessage{Body: &peerpb.PeerMessage_Delta{Delta: &peerpb.ShardDelta{
			Cluster: "c-a", Hostname: "web.default.svc.cluster.local"}}}), // no version
		rawFrame(t, &peerpb.PeerMessage{}), // nothing set
		rawFrame(t, &peerpb.PeerMessage{Body: &peerpb.PeerMessage_Snapshot{Snapshot: &peerpb.ClusterSnapshot{
			Cluster: "c/a", Version: &peerpb.Version{Term: 1, Owner: "a"}}}}), // a cluster ID no secret can have
		rawFrame(t, &peerpb.PeerMessage{Body: &peerpb.PeerMessage_Hello{Hello: &peerpb.Hello{
			Replica: "a", Protocol: 1}}}), // a second hello
	} {
		if err := raw.sendRaw(bad); err != nil {
			t.Fatal(err)
		}
	}
	raw.send(&federation.PeerMessage{Delta: peerDelta("a", 1)})
	peerEventually(t, "b to get the good delta", func() bool { return len(b.rec.all("a")) == 1 })
	if got := b.rec.all("a")[0]; got.Delta == nil || got.Delta.Version.Seq != 1 {
		t.Fatalf("handler got %+v, want only the good delta", got)
	}
	for reason, want := range map[string]float64{"decode": 1, "invalid": 3, "hello_again": 1} {
		if got := b.rejected(t, reason); got != want {
			t.Errorf("rejected{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	if got := b.metric(t, "meshfed_federation_peer_messages_total", "direction", "received", "kind", "delta"); got != 1 {
		t.Errorf("deltas received = %v, want 1", got)
	}
	// And the other way.
	if err := b.peers.Broadcast(&federation.PeerMessage{Resync: []model.ClusterID{"c-a"}}); err != nil {
		t.Fatal(err)
	}
	m, err := raw.recv()
	if err != nil || len(m.Resync) != 1 {
		t.Fatalf("after malformed frames, b sent %+v, %v; want the resync", m, err)
	}
}

// TestPeerSendOverflowClosesStream: a peer that stops reading fills its
// queue; the stream is closed and counted rather than buffering forever.
func TestPeerSendOverflowClosesStream(t *testing.T) {
	f := newPeerFleet(t)
	b := f.start("b", "", func(o *peerstream.PeerOptions) { o.SendQueue = 2 })
	_, client := f.tlsFor("a")
	raw := dialPeerRaw(t, b.addr, client)
	raw.send(&federation.PeerMessage{Hello: &federation.Hello{Replica: "a", Protocol: federation.PeerProtocol}})
	peerEventually(t, "b to connect a", b.connectedTo("a"))

	big := json.RawMessage(`"` + strings.Repeat("x", 1<<20) + `"`)
	peerEventually(t, "an overflow", func() bool {
		_ = b.peers.Broadcast(&federation.PeerMessage{Trust: big})
		return b.metric(t, "meshfed_federation_peer_send_overflows_total") >= 1
	})
	peerEventually(t, "the stream to close", func() bool {
		return len(b.peers.Connected()) == 0 && b.rec.downCount("a") == 1
	})
	if err := b.peers.Send("a", &federation.PeerMessage{Trust: big}); !errors.Is(err, peerstream.ErrPeerNotConnected) {
		t.Errorf("Send after overflow: %v, want ErrPeerNotConnected", err)
	}
}

func TestPeerMessageValidate(t *testing.T) {
	okSnap := peerSnapshot("a")
	valid := map[string]*federation.PeerMessage{
		"hello":          {Hello: &federation.Hello{Replica: "hub-0", Protocol: 1, Digest: federation.Digest{"c1": {Term: 2, Seq: 3, Owner: "hub-1"}, "c2": {}}}},
		"snapshot":       {Snapshot: okSnap},
		"empty snapshot": {Snapshot: &federation.ClusterSnapshot{Cluster: "c1", Version: federation.Version{Term: 1, Owner: "a"}}},
		"delta":          {Delta: peerDelta("a", 1)},
		"delete delta":   {Delta: &federation.ShardDelta{Cluster: "c1", Version: federation.Version{Term: 1, Seq: 4, Owner: "a"}, Hostname: peerHost}},
		"resync":         {Resync: []model.ClusterID{"c1", "c_2.x"}},
		"trust":          {Trust: json.RawMessage(`{"roots":[]}`)},
	}
	for name, m := range valid {
		if err := m.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	withShard := func(edit func(*model.ServiceShard)) *federation.PeerMessage {
		s := peerShard()
		edit(s)
		d := peerDelta("a", 1)
		d.Shard = s
		return &federation.PeerMessage{Delta: d}
	}
	invalid := map[string]*federation.PeerMessage{
		"nil":                      nil,
		"nothing":                  {},
		"null trust only":          {Trust: json.RawMessage(`null`)},
		"two fields":               {Snapshot: okSnap, Resync: []model.ClusterID{"c1"}},
		"snapshot no cluster":      {Snapshot: &federation.ClusterSnapshot{Version: federation.Version{Term: 1, Owner: "a"}}},
		"snapshot bad cluster":     {Snapshot: &federation.ClusterSnapshot{Cluster: "a/b", Version: federation.Version{Term: 1, Owner: "a"}}},
		"snapshot term 0":          {Snapshot: &federation.ClusterSnapshot{Cluster: "c1", Version: federation.Version{Owner: "a"}}},
		"snapshot no owner":        {Snapshot: &federation.ClusterSnapshot{Cluster: "c1", Version: federation.Version{Term: 1}}},
		"snapshot nil shard":       {Snapshot: &federation.ClusterSnapshot{Cluster: "c1", Version: federation.Version{Term: 1, Owner: "a"}, Shards: map[model.Hostname]*model.ServiceShard{peerHost: nil}}},
		"snapshot bad hostname":    {Snapshot: &federation.ClusterSnapshot{Cluster: "c1", Version: federation.Version{Term: 1, Owner: "a"}, Shards: map[model.Hostname]*model.ServiceShard{"Not_A_Host": peerShard()}}},
		"delta no version":         {Delta: &federation.ShardDelta{Cluster: "c1", Hostname: peerHost}},
		"delta seq 0":              {Delta: &federation.ShardDelta{Cluster: "c1", Version: federation.Version{Term: 1, Owner: "a"}, Hostname: peerHost}},
		"delta no hostname":        {Delta: &federation.ShardDelta{Cluster: "c1", Version: federation.Version{Term: 1, Seq: 1, Owner: "a"}}},
		"delta bad owner":          {Delta: &federation.ShardDelta{Cluster: "c1", Version: federation.Version{Term: 1, Seq: 1, Owner: "a/b"}, Hostname: peerHost}},
		"shard without service":    withShard(func(s *model.ServiceShard) { s.Service = nil }),
		"shard of another host":    withShard(func(s *model.ServiceShard) { s.Service.Hostname = "other.default.svc.cluster.local" }),
		"endpoint without address": withShard(func(s *model.ServiceShard) { s.Endpoints[0].Address = netip.Addr{} }),
		"resync bad cluster":       {Resync: []model.ClusterID{"c1", ""}},
		"trust not JSON":           {Trust: json.RawMessage(`{`)},
		"hello no replica":         {Hello: &federation.Hello{Protocol: 1}},
		"hello bad replica":        {Hello: &federation.Hello{Replica: "a b", Protocol: 1}},
		"hello protocol 0":         {Hello: &federation.Hello{Replica: "a"}},
		"hello digest term 0":      {Hello: &federation.Hello{Replica: "a", Protocol: 1, Digest: federation.Digest{"c1": {Seq: 1, Owner: "a"}}}},
	}
	for name, m := range invalid {
		if err := m.Validate(); !errors.Is(err, federation.ErrMalformedMessage) {
			t.Errorf("%s: err = %v, want ErrMalformedMessage", name, err)
		}
	}
}

// FuzzPeerMessage feeds arbitrary frames through the receive path
// (protobuf into a PeerMessage, then Validate): no panic, every refusal
// wraps ErrMalformedMessage, and an accepted message survives a round
// trip unchanged.
func FuzzPeerMessage(f *testing.F) {
	for _, m := range []*federation.PeerMessage{
		{Hello: &federation.Hello{Replica: "a", Protocol: 1, Digest: federation.Digest{"c1": {Term: 1, Owner: "a"}}}},
		{Snapshot: peerSnapshot("a")},
		{Delta: peerDelta("a", 3)},
		{Resync: []model.ClusterID{"c1"}},
		{Superseded: &federation.ClusterTombstone{Cluster: "c1", Version: federation.Version{Term: 4, Owner: "a"}}},
		{Trust: json.RawMessage(`{"roots":["pem"],"removed":{}}`)},
	} {
		data, err := federation.EncodePeerMessage(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{0x32, 0x04, 'n', 'u', 'l', 'l'}) // trust: null
	f.Add([]byte("\x1a\x03\x0a\x01c"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := federation.DecodePeerMessage(data)
		if err != nil {
			if !errors.Is(err, federation.ErrMalformedMessage) {
				t.Fatalf("error %v does not wrap ErrMalformedMessage", err)
			}
			return
		}
		again, err := federation.EncodePeerMessage(m)
		if err != nil {
			t.Fatalf("valid message does not encode: %v", err)
		}
		back, err := federation.DecodePeerMessage(again)
		if err != nil {
			t.Fatalf("valid message invalid after a round trip: %v", err)
		}
		if !reflect.DeepEqual(normalize(m), normalize(back)) {
			t.Fatalf("round trip changed the message:\n%+v\n%+v", m, back)
		}
	})
}

// normalize puts the send times of m in one location, so that DeepEqual
// compares instants.
func normalize(m *federation.PeerMessage) *federation.PeerMessage {
	c := *m
	if c.Snapshot != nil {
		s := *c.Snapshot
		s.Sent = s.Sent.UTC()
		c.Snapshot = &s
	}
	if c.Delta != nil {
		d := *c.Delta
		d.Sent = d.Sent.UTC()
		c.Delta = &d
	}
	return &c
}

func TestPeerCertificateIdentity(t *testing.T) {
	ca, err := pki.NewCA("peer CA", time.Hour, peerNow)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := peerstream.PeerCertificate(ca, "hub-0.example", peerNow)
	if err != nil {
		t.Fatal(err)
	}
	leaf := cert.Leaf
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://cluster.local/meshfed/replica/hub-0.example" {
		t.Fatalf("URIs = %v", leaf.URIs)
	}
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) || !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		t.Errorf("ext key usage %v, want server and client", leaf.ExtKeyUsage)
	}
	for td, want := range map[pki.TrustDomain]error{"": nil, "cluster.local": nil, "example.org": peerstream.ErrPeerIdentity} {
		id, err := peerstream.ReplicaFromCertificate(leaf, td)
		if !errors.Is(err, want) || (want == nil && (err != nil || id != "hub-0.example")) {
			t.Errorf("trust domain %q: %q, %v; want error %v", td, id, err, want)
		}
	}
	for _, bad := range []federation.ReplicaID{"", "a/b", "..", "a b", "ü"} {
		if _, err := peerstream.PeerCertificate(ca, bad, peerNow); !errors.Is(err, peerstream.ErrPeerIdentity) {
			t.Errorf("PeerCertificate(%q): %v, want ErrPeerIdentity", bad, err)
		}
	}

	// Certificates that do not name a replica.
	issue := func(uris ...string) *x509.Certificate {
		var us []*url.URL
		for _, s := range uris {
			u, err := url.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			us = append(us, u)
		}
		certPEM, keyPEM, err := ca.Issue(pki.IssueOptions{CommonName: "x", URIs: us, Validity: time.Hour, Client: true, Now: peerNow})
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return pair.Leaf
	}
	for name, c := range map[string]*x509.Certificate{
		"no URI":          issue(),
		"workload ID":     issue("spiffe://cluster.local/ns/default/sa/web"),
		"two IDs":         issue("spiffe://cluster.local/meshfed/replica/a", "spiffe://cluster.local/meshfed/replica/b"),
		"not spiffe":      issue("https://cluster.local/meshfed/replica/a"),
		"escaped slash":   issue("spiffe://cluster.local/meshfed/replica/a%2Fb"),
		"nested path":     issue("spiffe://cluster.local/meshfed/replica/a/b"),
		"empty replica":   issue("spiffe://cluster.local/meshfed/replica/"),
		"with port":       issue("spiffe://cluster.local:8080/meshfed/replica/a"),
		"no trust domain": issue("spiffe:///meshfed/replica/a"),
	} {
		if id, err := peerstream.ReplicaFromCertificate(c, ""); !errors.Is(err, peerstream.ErrPeerIdentity) {
			t.Errorf("%s: %q, %v; want ErrPeerIdentity", name, id, err)
		}
	}
}

func TestPeerNewPeersRejectsBadOptions(t *testing.T) {
	f := newPeerFleet(t)
	server, client := f.tlsFor("a")
	good := func() peerstream.PeerOptions {
		return peerstream.PeerOptions{Self: "a", ListenAddr: "127.0.0.1:0", TLS: server.Clone(), ClientTLS: client.Clone(), Handler: newPeerRecorder("a")}
	}
	if _, err := peerstream.NewPeers(good()); err != nil {
		t.Fatalf("good options: %v", err)
	}
	for name, edit := range map[string]func(*peerstream.PeerOptions){
		"bad self":             func(o *peerstream.PeerOptions) { o.Self = "a/b" },
		"no listen address":    func(o *peerstream.PeerOptions) { o.ListenAddr = "" },
		"no handler":           func(o *peerstream.PeerOptions) { o.Handler = nil },
		"no server TLS":        func(o *peerstream.PeerOptions) { o.TLS = nil },
		"no client auth":       func(o *peerstream.PeerOptions) { o.TLS.ClientAuth = tls.RequestClientCert },
		"no client cert":       func(o *peerstream.PeerOptions) { o.ClientTLS.Certificates = nil },
		"unverified server":    func(o *peerstream.PeerOptions) { o.ClientTLS.VerifyConnection = nil },
		"invalid trust domain": func(o *peerstream.PeerOptions) { o.TrustDomain = "Example.ORG" },
	} {
		o := good()
		edit(&o)
		if _, err := peerstream.NewPeers(o); !errors.Is(err, peerstream.ErrInvalidPeerOptions) {
			t.Errorf("%s: %v, want ErrInvalidPeerOptions", name, err)
		}
	}
	// Two transports cannot register metrics on one registry.
	reg := prometheus.NewRegistry()
	o := good()
	o.Metrics = reg
	if _, err := peerstream.NewPeers(o); err != nil {
		t.Fatal(err)
	}
	if _, err := peerstream.NewPeers(o); err == nil {
		t.Error("second registration on one registry succeeded")
	}
}

// TestPeerTrustDomainEnforced: with TrustDomain set, a peer certificate of
// another trust domain is refused even from the shared CA.
func TestPeerTrustDomainEnforced(t *testing.T) {
	f := newPeerFleet(t)
	b := f.start("b", "", func(o *peerstream.PeerOptions) { o.TrustDomain = "meshfed.example" })
	// PeerCertificate names cluster.local.
	_, client := f.tlsFor("a")
	raw := dialPeerRaw(t, b.addr, client)
	_ = raw.sendRaw(`{"hello":{"replica":"a","protocol":1}}`) // refused before it is read; the error shows in recv
	if _, err := raw.recv(); status.Code(err) != codes.Unauthenticated {
		t.Errorf("stream ended with %v, want Unauthenticated", err)
	}
	if got := b.rejected(t, "identity"); got != 1 {
		t.Errorf("rejected{identity} = %v, want 1", got)
	}
}
