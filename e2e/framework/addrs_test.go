package framework

import (
	"net"
	"slices"
	"testing"
)

// fakeListener is a listener of a fixed address that does nothing.
type fakeListener struct{ addr string }

func (l fakeListener) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (l fakeListener) Close() error              { return nil }
func (l fakeListener) Addr() net.Addr            { a, _ := net.ResolveTCPAddr("tcp", l.addr); return a }

// TestPickAddrsSkipsTaken: an address handed out before (a hub's preset
// peer address, not bound yet, so free again) is not handed out again,
// nor is one address twice: the kernel may offer either, as it did when a
// hub got the same port for its peer and monitoring listeners and could
// not start.
func TestPickAddrsSkipsTaken(t *testing.T) {
	offers := []string{"127.0.0.1:4001", "127.0.0.1:4002", "127.0.0.1:4002", "127.0.0.1:4003", "127.0.0.1:4004"}
	listen := func() (net.Listener, error) {
		l := fakeListener{offers[0]}
		offers = offers[1:]
		return l, nil
	}
	got, err := pickAddrs(listen, 2, []string{"127.0.0.1:4001", "127.0.0.1:4003"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"127.0.0.1:4002", "127.0.0.1:4004"}; !slices.Equal(got, want) {
		t.Fatalf("picked %v, want %v", got, want)
	}
	real, err := freeAddrs(3, got...)
	if err != nil || len(real) != 3 {
		t.Fatalf("freeAddrs: %v %v", real, err)
	}
}
