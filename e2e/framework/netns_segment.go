//go:build linux

package framework

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
)

// Segments: separate networks of Pods, as clusters in different VPCs are.
// A segment is a bridge of its own, 198.19.K.0/24 with the host at
// 198.19.K.1. Its Pods have routes only to their segment and to the pod
// network's bridge (its Pods' 198.18.0.0/16, through the host): they reach the hub
// (which listens on the bridge's address) and Pods on the bridge, but no
// Pod of another segment, to which they have no route. A Pod of a segment
// with a leg on the bridge (Pod.AddLeg) is what connects networks: an
// east-west gateway, reached by other segments at its bridge address.
//
// The host forwards between a segment's bridge and the pod network's
// bridge (their per-interface forwarding is turned on, nothing else's).

// Segment is one separate network of Pods.
type Segment struct {
	net    *PodNetwork
	bridge string
	prefix netip.Prefix // 198.19.K.0/24
	host   netip.Addr   // 198.19.K.1

	mu   sync.Mutex // guards next
	next int
}

// maxSegments is how many segments one pod network makes (K in 1..254).
const maxSegments = 254

// AddSegment creates a segment: its bridge, the host's address on it, and
// forwarding between it and the pod network's bridge.
func (n *PodNetwork) AddSegment(ctx context.Context) (*Segment, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, errors.New("framework: pod network is closed")
	}
	k := len(n.segments) + 1
	if k > maxSegments {
		n.mu.Unlock()
		return nil, fmt.Errorf("framework: pod network has %d segments already", maxSegments)
	}
	s := &Segment{
		net:    n,
		bridge: fmt.Sprintf("%s%s-s%x", bridgePrefix, n.id, k),
		prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(k), 0}), 24),
		host:   netip.AddrFrom4([4]byte{198, 19, byte(k), 1}),
	}
	n.segments = append(n.segments, s) // Close deletes it, made or not
	n.mu.Unlock()
	for _, args := range [][]string{
		{"link", "add", s.bridge, "type", "bridge"},
		// A fixed address, as the pod network's bridge has (see
		// NewPodNetwork: a bridge's MAC otherwise follows its ports, and
		// a Pod added later cut the others off from the hub).
		{"link", "set", s.bridge, "address", fmt.Sprintf("02:00:c6:13:%02x:01", k)},
		{"addr", "add", netip.PrefixFrom(s.host, 24).String(), "dev", s.bridge},
		{"link", "set", s.bridge, "up"},
	} {
		if err := n.ip(ctx, args...); err != nil {
			return nil, err
		}
	}
	for _, br := range []string{s.bridge, n.bridge} {
		if err := setForwarding(br); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// setForwarding lets the host forward IPv4 packets received on link.
func setForwarding(link string) error {
	path := filepath.Join("/proc/sys/net/ipv4/conf", link, "forwarding")
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("framework: forwarding on %s: %w", link, err)
	}
	return nil
}

// Prefix is the segment's address range.
func (s *Segment) Prefix() netip.Prefix { return s.prefix }

// nextAddr numbers the segment's Pods 198.19.K.2 on.
func (s *Segment) nextAddr() (netip.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next >= 253 {
		return netip.Addr{}, fmt.Errorf("framework: segment %s is full", s.prefix)
	}
	a := s.prefix.Addr().As4()
	a[3] = byte(2 + s.next)
	s.next++
	return netip.AddrFrom4(a), nil
}

// bridgeRange is the part of the pod network's prefix the bridge's Pods
// are numbered in (nextMainAddrLocked); segments are in 198.19.0.0/16.
var bridgeRange = netip.MustParsePrefix("198.18.0.0/16")

// podRoutes are a segment Pod's routes besides its own segment: the pod
// network's bridge through the host, and nothing else.
func (s *Segment) podRoutes() [][]string {
	return [][]string{{bridgeRange.String(), "via", s.host.String()}}
}

// nextMainAddrLocked numbers the Pods' addresses on the bridge,
// 198.18.A.B.
func (n *PodNetwork) nextMainAddrLocked() (netip.Addr, error) {
	if n.nextMain >= maxPods {
		return netip.Addr{}, fmt.Errorf("framework: pod network is full (%d pods)", maxPods)
	}
	idx := n.nextMain
	n.nextMain++
	return netip.AddrFrom4([4]byte{198, 18, byte(1 + idx/254), byte(1 + idx%254)}), nil
}

// AddLeg gives the Pod a second interface, eth1, on the pod network's
// bridge, and routes every segment through it: the Pod is then reachable
// at the returned bridge address from every segment, and answers them
// from there, as a gateway with a public address does.
func (p *Pod) AddLeg(ctx context.Context) (netip.Addr, error) {
	n := p.net
	n.mu.Lock()
	ip, err := n.nextMainAddrLocked()
	idx := n.next
	n.next++
	n.mu.Unlock()
	if err != nil {
		return netip.Addr{}, err
	}
	veth := fmt.Sprintf("%s%s-%x", vethPrefix, n.id, idx)
	p.legs = append(p.legs, veth)
	for _, args := range [][]string{
		// The bridge is on eth1 from now on, not through the segment.
		{"-n", p.netns, "route", "del", bridgeRange.String()},
		{"link", "add", veth, "type", "veth", "peer", "name", "eth1", "netns", p.netns},
		{"link", "set", veth, "master", n.bridge, "up"},
		{"-n", p.netns, "addr", "add", netip.PrefixFrom(ip, podNetworkPrefix.Bits()).String(), "dev", "eth1"},
		{"-n", p.netns, "link", "set", "eth1", "up"},
		{"-n", p.netns, "route", "add", "198.19.0.0/16", "via", PodNetworkGateway.String(), "dev", "eth1"},
	} {
		if err := n.ip(ctx, args...); err != nil {
			return netip.Addr{}, err
		}
	}
	return ip, nil
}
