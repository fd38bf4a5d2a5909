package testutil

import (
	"bufio"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer answers each line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

func roundTrip(t *testing.T, addr string) time.Duration {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "ping\n" {
		t.Fatalf("through the proxy: %q, %v", line, err)
	}
	return time.Since(start)
}

func TestTCPProxyCutRestoreLatency(t *testing.T) {
	p := StartTCPProxy(t, echoServer(t))
	roundTrip(t, p.Addr())

	p.Cut()
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		_ = c.Close()
		t.Fatal("a cut proxy accepted a connection")
	}
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, p.Addr())

	// A round trip crosses the proxy twice: at least twice the latency.
	const latency = 50 * time.Millisecond
	p.SetLatency(latency)
	if rtt := roundTrip(t, p.Addr()); rtt < 2*latency {
		t.Errorf("round trip %v with latency %v each way", rtt, latency)
	}
}

func TestBlackhole(t *testing.T) {
	c, err := net.Dial("tcp", StartBlackhole(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, %v from a blackhole; want a timeout", n, err)
	}
}

func TestUDPRelay(t *testing.T) {
	echo, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = echo.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := echo.ReadFromUDP(buf)
			if err != nil {
				return
			}
			_, _ = echo.WriteToUDP(buf[:n], from)
		}
	}()
	r := StartUDPRelay(t, "127.0.0.1:0", echo.LocalAddr().String())
	c, err := net.Dial("udp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	exchange := func() error {
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 16)
		n, err := c.Read(buf)
		if err == nil && string(buf[:n]) != "ping" {
			t.Fatalf("relayed %q", buf[:n])
		}
		return err
	}
	if err := exchange(); err != nil {
		t.Fatalf("through the relay: %v", err)
	}
	r.Cut()
	if err := exchange(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("through a cut relay: %v, want no answer", err)
	}
	r.Restore()
	if err := exchange(); err != nil {
		t.Fatalf("through the restored relay: %v", err)
	}
}
