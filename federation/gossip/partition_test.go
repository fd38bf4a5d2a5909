package gossip

import (
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/meshfed/meshfed/federation"
)

// partitionNet is the network between test nodes: while split, a node
// reaches only the nodes of its own side. Safe for concurrent use.
type partitionNet struct {
	mu    sync.Mutex
	side  map[string]int // gossip address -> side
	split bool
}

func (p *partitionNet) blocked(from, to string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.split && p.side[from] != p.side[to]
}

func (p *partitionNet) setSplit(split bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.split = split
}

func (p *partitionNet) place(addr string, side int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.side[addr] = side
}

// cutTransport is memberlist's own UDP/TCP transport whose sends (packets
// and new streams) to a cut address fail, as over a partitioned network.
// It embeds the Transport interface only, so memberlist reaches it through
// WriteTo and DialTimeout.
type cutTransport struct {
	memberlist.Transport
	self string
	net  *partitionNet
}

func (c cutTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if c.net.blocked(c.self, addr) {
		return time.Now(), nil // lost on the way, as UDP is
	}
	return c.Transport.WriteTo(b, addr)
}

func (c cutTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if c.net.blocked(c.self, addr) {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errPartitioned}
	}
	return c.Transport.DialTimeout(addr, timeout)
}

type partitionError struct{}

func (partitionError) Error() string { return "network partitioned (test)" }

var errPartitioned = partitionError{}

// withPartitionNet runs the node's gossip over a cutTransport of pn, on
// the given side of it.
func withPartitionNet(t *testing.T, pn *partitionNet, side int) gossipOpt {
	return func(o *MembershipOptions) {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}, BindPort: 0})
		if err != nil {
			t.Fatal(err)
		}
		port := nt.GetAutoBindPort()
		o.BindAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		pn.place(o.BindAddr, side)
		prev := o.Config
		o.Config = func(c *memberlist.Config) {
			if prev != nil {
				prev(c)
			}
			c.Transport = cutTransport{Transport: nt, self: o.BindAddr, net: pn}
		}
		// Quick rejoins, so the test waits seconds, not the default 5 s.
		o.RejoinInterval = time.Second
	}
}

// TestPartitionHeals: a and b on one side, c on the other, cut apart. Each
// side declares the other dead and keeps running; after the heal the
// periodic rejoins bring all three together again (memberlist alone would
// leave them apart: each side gossips only to the members it believes
// alive). Printed: the time to split and to heal.
func TestPartitionHeals(t *testing.T) {
	pn := &partitionNet{side: map[string]int{}}
	a := newGossipNode(t, "a", withPartitionNet(t, pn, 0)).start()
	b := newGossipNode(t, "b", withPartitionNet(t, pn, 0), withGossipJoin(a.LocalAddr())).start()
	c := newGossipNode(t, "c", withPartitionNet(t, pn, 1), withGossipJoin(a.LocalAddr())).start()
	all := []federation.ReplicaID{"a", "b", "c"}
	waitGossip(t, 10*time.Second, "all three to see each other", func() bool {
		return a.sees(all...) && b.sees(all...) && c.sees(all...)
	})

	// c alone on its side.
	start := time.Now()
	pn.setSplit(true)
	waitGossip(t, 30*time.Second, "each side to declare the other dead", func() bool {
		return a.sees("a", "b") && b.sees("a", "b") && c.sees("c")
	})
	t.Logf("split after %v", time.Since(start).Round(time.Millisecond))

	// Several rejoin rounds fail while cut, and say so.
	time.Sleep(3 * time.Second)
	if n := c.metric(t, "meshfed_gossip_rejoins_total", "result", "failed"); n == 0 {
		t.Error("c made no (failed) rejoin attempt while cut off")
	}

	healed := time.Now()
	pn.setSplit(false)
	waitGossip(t, 30*time.Second, "all three together again after the heal", func() bool {
		return a.sees(all...) && b.sees(all...) && c.sees(all...)
	})
	t.Logf("together again %v after the heal", time.Since(healed).Round(time.Millisecond))
	if n := a.metric(t, "meshfed_gossip_rejoins_total", "result", "contacted") + c.metric(t, "meshfed_gossip_rejoins_total", "result", "contacted"); n == 0 {
		t.Error("healed without a rejoin: the test does not partition what it means to")
	}
}
