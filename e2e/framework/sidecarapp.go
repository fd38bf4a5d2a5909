//go:build linux

package framework

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The applications of sidecar Pods: servers of the test process listening
// inside a Pod (Pod.Listen), so they need no process of their own. Envoy
// reaches them on the Pod's loopback, as it reaches the app container of
// a real Pod.

// HTTPEchoHeaderXFCC is the header an Envoy server sidecar adds with the
// client's certificate identity.
const HTTPEchoHeaderXFCC = "X-Forwarded-Client-Cert"

// HTTPEchoReply is what an HTTP echo server answers, as JSON.
type HTTPEchoReply struct {
	// Identity is the server's, "<cluster>/<pod>".
	Identity string `json:"identity"`
	// Host, Path and Proto are the request's as the server saw them.
	Host  string `json:"host"`
	Path  string `json:"path"`
	Proto string `json:"proto"`
	// XFCC is the request's x-forwarded-client-cert header.
	XFCC string `json:"xfcc"`
	// TLS says the request came over TLS (StartHTTPSEcho), and SNI is the
	// server name the client asked for in its handshake.
	TLS bool   `json:"tls,omitempty"`
	SNI string `json:"sni,omitempty"`
}

// HTTPEcho is an HTTP/1.1 echo server in a Pod.
type HTTPEcho struct {
	srv *http.Server
	l   net.Listener
	// failEvery, when positive, makes every failEvery-th request since
	// SetFailEvery fail; seen counts those requests, failed the failures.
	failEvery, seen, failed atomic.Int64
}

// StartHTTPEcho serves HTTPEchoReply on addr (IP literal and port) in pod.
func StartHTTPEcho(ctx context.Context, pod *Pod, addr, identity string) (*HTTPEcho, error) {
	return startHTTPEcho(ctx, pod, addr, identity, nil)
}

// StartHTTPSEcho is StartHTTPEcho over TLS with cfg (its certificate), as
// a server outside the mesh that a sidecar originates TLS to.
func StartHTTPSEcho(ctx context.Context, pod *Pod, addr, identity string, cfg *tls.Config) (*HTTPEcho, error) {
	if cfg == nil {
		return nil, errors.New("framework: https echo needs a TLS config")
	}
	return startHTTPEcho(ctx, pod, addr, identity, cfg)
}

func startHTTPEcho(ctx context.Context, pod *Pod, addr, identity string, tlsCfg *tls.Config) (*HTTPEcho, error) {
	l, err := pod.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("framework: http echo %s: %w", identity, err)
	}
	if tlsCfg != nil {
		l = tls.NewListener(l, tlsCfg)
	}
	e := &HTTPEcho{l: l}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e.shouldFail() {
			http.Error(w, identity+": failing on purpose", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		reply := HTTPEchoReply{
			Identity: identity, Host: r.Host, Path: r.URL.Path, Proto: r.Proto, XFCC: r.Header.Get(HTTPEchoHeaderXFCC),
		}
		if r.TLS != nil {
			reply.TLS, reply.SNI = true, r.TLS.ServerName
		}
		_ = json.NewEncoder(w).Encode(reply)
	})
	e.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.srv.Serve(l) }()
	return e, nil
}

// Addr returns where the server listens (inside its Pod).
func (e *HTTPEcho) Addr() net.Addr { return e.l.Addr() }

// Close stops the server.
func (e *HTTPEcho) Close() error { return e.srv.Close() }

// SetFailEvery makes the n-th, 2n-th, … request from now on fail with
// 503 Service Unavailable instead of an echo reply (n = 1: every request,
// n = 2: every second one), as a flaky or broken app does; 0 stops
// failing. Failed counts anew.
func (e *HTTPEcho) SetFailEvery(n int) {
	e.failEvery.Store(0)
	e.seen.Store(0)
	e.failed.Store(0)
	e.failEvery.Store(int64(n))
}

// Failed returns how many requests failed since SetFailEvery.
func (e *HTTPEcho) Failed() int { return int(e.failed.Load()) }

func (e *HTTPEcho) shouldFail() bool {
	n := e.failEvery.Load()
	if n <= 0 || e.seen.Add(1)%n != 0 {
		return false
	}
	e.failed.Add(1)
	return true
}

// GetHTTPEcho sends GET http://<addr>/ with Host host from inside pod and
// decodes the reply; a status other than 200 is an error.
func GetHTTPEcho(ctx context.Context, pod *Pod, addr, host string) (*HTTPEchoReply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return nil, err
	}
	req.Host = host
	resp, err := pod.HTTPClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("framework: GET %s (Host %s): status %d: %s", addr, host, resp.StatusCode, body)
	}
	reply := &HTTPEchoReply{}
	if err := json.Unmarshal(body, reply); err != nil {
		return nil, fmt.Errorf("framework: GET %s (Host %s): not an echo reply: %q", addr, host, body)
	}
	return reply, nil
}

// TCPEcho is a raw TCP server in a Pod: on each connection it writes
// "<identity>\n", then echoes what it reads.
type TCPEcho struct {
	l net.Listener
}

// StartTCPEcho listens on addr (IP literal and port) in pod.
func StartTCPEcho(ctx context.Context, pod *Pod, addr, identity string) (*TCPEcho, error) {
	l, err := pod.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("framework: tcp echo %s: %w", identity, err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := io.WriteString(c, identity+"\n"); err != nil {
					return
				}
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return &TCPEcho{l: l}, nil
}

// Addr returns where the server listens (inside its Pod).
func (e *TCPEcho) Addr() net.Addr { return e.l.Addr() }

// Close stops accepting; open connections end with their clients.
func (e *TCPEcho) Close() error { return e.l.Close() }

// CallTCPEcho connects to addr from inside pod, sends msg and returns the
// server's identity line and the echo of msg.
func CallTCPEcho(ctx context.Context, pod *Pod, addr, msg string) (identity, echo string, err error) {
	c, err := pod.Dial(ctx, "tcp", addr)
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, msg); err != nil {
		return "", "", err
	}
	br := bufio.NewReader(c)
	identity, err = br.ReadString('\n')
	if err != nil {
		return "", "", fmt.Errorf("framework: tcp echo %s: identity: %w", addr, err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(br, buf); err != nil {
		return "", "", errors.Join(fmt.Errorf("framework: tcp echo %s: echo", addr), err)
	}
	return identity[:len(identity)-1], string(buf), nil
}

// StartGRPCEcho serves the echo service (see EchoServer) on addr (IP
// literal and port) in pod: the gRPC app of a sidecar Pod.
func StartGRPCEcho(ctx context.Context, pod *Pod, addr, identity string) (*EchoServer, error) {
	l, err := pod.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("framework: grpc echo %s: %w", identity, err)
	}
	ap, err := netip.ParseAddrPort(l.Addr().String())
	if err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("framework: grpc echo address: %w", err)
	}
	gs := grpc.NewServer()
	s := &EchoServer{identity: identity, addr: ap, srv: gs, done: make(chan struct{})}
	gs.RegisterService(newEchoServiceDesc(), s)
	go func() {
		defer close(s.done)
		_ = gs.Serve(l)
	}()
	return s, nil
}

// DialGRPCInPod makes a plaintext gRPC channel from inside pod whose
// connections all go to addr (IP literal and port, e.g. the Pod's Envoy on
// 127.0.0.1:<service port>) and whose :authority is authority
// (<host>:<port>, which Envoy's route matches), as an app calls a
// service through its sidecar.
func DialGRPCInPod(pod *Pod, addr, authority string) (*grpc.ClientConn, error) {
	dial := func(ctx context.Context, _ string) (net.Conn, error) { return pod.Dial(ctx, "tcp", addr) }
	cc, err := grpc.NewClient("passthrough:///"+authority,
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dial))
	if err != nil {
		return nil, fmt.Errorf("framework: grpc channel to %s in pod %s: %w", authority, pod.IP(), err)
	}
	return cc, nil
}
