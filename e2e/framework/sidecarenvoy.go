//go:build linux

package framework

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Looking into a running sidecar: Envoy's admin interface and readiness
// inside the Pod, and pilot-agent's SDS socket.

// get fetches path from a port on the Pod's loopback.
func (s *Sidecar) get(ctx context.Context, port int, path string) (int, []byte, error) {
	url := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := s.opts.Pod.HTTPClient().Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Admin GETs path from Envoy's admin interface (127.0.0.1:15000 in the Pod),
// e.g. "/config_dump", "/clusters?format=json", "/server_info", "/certs".
func (s *Sidecar) Admin(ctx context.Context, path string) ([]byte, error) {
	code, b, err := s.get(ctx, EnvoyAdminPort, path)
	if err != nil {
		return nil, fmt.Errorf("framework: envoy admin %s of %s: %w", path, s.opts.Name, err)
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("framework: envoy admin %s of %s: status %d: %s", path, s.opts.Name, code, bytes.TrimSpace(b))
	}
	return b, nil
}

// ConfigDump returns Envoy's /config_dump (JSON).
func (s *Sidecar) ConfigDump(ctx context.Context) ([]byte, error) {
	return s.Admin(ctx, "/config_dump")
}

// Clusters returns Envoy's /clusters in its JSON form.
func (s *Sidecar) Clusters(ctx context.Context) ([]byte, error) {
	return s.Admin(ctx, "/clusters?format=json")
}

// ClusterPriorities reads Envoy's /clusters (text form, which prints a
// "<cluster>::<host:port>::priority::<n>" line per host) and maps every
// host of cluster to its priority: 0 for the locality Envoy prefers, then
// 1, 2, … as the hub's EDS assigned them.
func (s *Sidecar) ClusterPriorities(ctx context.Context, cluster string) (map[string]int, error) {
	b, err := s.Admin(ctx, "/clusters")
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), cluster+"::")
		if !ok {
			continue
		}
		host, prio, ok := strings.Cut(rest, "::priority::")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(prio)
		if err != nil {
			return nil, fmt.Errorf("framework: /clusters of %s: priority of %s: %w", s.opts.Name, host, err)
		}
		out[host] = n
	}
	return out, nil
}

// EnvoyConfig names what Envoy's /config_dump holds from xDS: the active
// listeners, clusters and routes (static ones of the bootstrap excluded),
// and the clusters still warming: an added or changed EDS cluster warms
// until the control plane sends its ClusterLoadAssignment, even an
// unchanged one, and Envoy keeps using the old version meanwhile.
type EnvoyConfig struct {
	Listeners, Clusters, Routes []string
	WarmingClusters             []string
}

// DynamicConfig reads /config_dump and lists the names of the listeners,
// clusters (active and warming) and route configurations Envoy took from
// the hub, sorted.
func (s *Sidecar) DynamicConfig(ctx context.Context) (*EnvoyConfig, error) {
	b, err := s.ConfigDump(ctx)
	if err != nil {
		return nil, err
	}
	// Only the few fields read here: the dump's full schema is Envoy's.
	var dump struct {
		Configs []struct {
			Type      string `json:"@type"`
			Listeners []struct {
				Name string `json:"name"`
			} `json:"dynamic_listeners"`
			Clusters []struct {
				Cluster struct {
					Name string `json:"name"`
				} `json:"cluster"`
			} `json:"dynamic_active_clusters"`
			Warming []struct {
				Cluster struct {
					Name string `json:"name"`
				} `json:"cluster"`
			} `json:"dynamic_warming_clusters"`
			Routes []struct {
				Route struct {
					Name string `json:"name"`
				} `json:"route_config"`
			} `json:"dynamic_route_configs"`
		} `json:"configs"`
	}
	if err := json.Unmarshal(b, &dump); err != nil {
		return nil, fmt.Errorf("framework: decoding /config_dump of %s: %w", s.opts.Name, err)
	}
	out := &EnvoyConfig{}
	for _, c := range dump.Configs {
		for _, l := range c.Listeners {
			out.Listeners = append(out.Listeners, l.Name)
		}
		for _, cl := range c.Clusters {
			out.Clusters = append(out.Clusters, cl.Cluster.Name)
		}
		for _, cl := range c.Warming {
			out.WarmingClusters = append(out.WarmingClusters, cl.Cluster.Name)
		}
		for _, r := range c.Routes {
			out.Routes = append(out.Routes, r.Route.Name)
		}
	}
	slices.Sort(out.Listeners)
	slices.Sort(out.Clusters)
	slices.Sort(out.Routes)
	slices.Sort(out.WarmingClusters)
	return out, nil
}

// ServerInfo is the part of Envoy's /server_info the tests read.
type ServerInfo struct {
	Version string `json:"version"`
	State   string `json:"state"`
	Node    struct {
		ID string `json:"id"`
	} `json:"node"`
}

// ServerInfo returns Envoy's /server_info.
func (s *Sidecar) ServerInfo(ctx context.Context) (*ServerInfo, error) {
	b, err := s.Admin(ctx, "/server_info")
	if err != nil {
		return nil, err
	}
	// server_info holds more than ServerInfo; unknown fields are fine.
	si := &ServerInfo{}
	if err := json.Unmarshal(b, si); err != nil {
		return nil, fmt.Errorf("framework: decoding /server_info: %w", err)
	}
	si.Node.ID = serverInfoNodeID(b)
	return si, nil
}

// serverInfoNodeID digs the node ID out of /server_info, which nests it
// under command_line_options or node depending on the Envoy version.
func serverInfoNodeID(b []byte) string {
	var doc struct {
		Node struct {
			ID string `json:"id"`
		} `json:"node"`
		Options struct {
			ServiceNode string `json:"service_node"`
		} `json:"command_line_options"`
	}
	if json.Unmarshal(b, &doc) != nil {
		return ""
	}
	if doc.Node.ID != "" {
		return doc.Node.ID
	}
	return doc.Options.ServiceNode
}

// WaitAdmin waits until Envoy's admin interface answers. It fails early
// when pilot-agent exits, quoting the end of its log.
func (s *Sidecar) WaitAdmin(ctx context.Context) error {
	return s.poll(ctx, "envoy admin", func() error {
		_, err := s.ServerInfo(ctx)
		return err
	})
}

// WaitReady waits until the sidecar's readiness endpoint (Envoy's
// 127.0.0.1:15021/healthz/ready in the Pod) answers 200: Envoy is live and
// has its first listeners and clusters.
func (s *Sidecar) WaitReady(ctx context.Context) error {
	return s.poll(ctx, "readiness", func() error {
		code, b, err := s.get(ctx, EnvoyReadinessPort, "/healthz/ready")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("status %d: %s", code, bytes.TrimSpace(b))
		}
		return nil
	})
}

func (s *Sidecar) poll(ctx context.Context, what string, try func() error) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var last error
	for {
		if last = try(); last == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("framework: sidecar %s exited (%s) before %s; log tail:\n%s",
				s.opts.Name, exitDescription(s.waitErr), what, s.logTail(40))
		case <-ctx.Done():
			return fmt.Errorf("framework: sidecar %s: no %s: %w (last: %w)", s.opts.Name, what, ctx.Err(), last)
		case <-t.C:
		}
	}
}

// sdsSecretType is the SDS resource type.
const sdsSecretType = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"

// WorkloadCertificate asks pilot-agent's SDS server (the unix socket Envoy
// uses) for the secret "default" and returns its leaf certificate: the
// certificate the agent got from the hub's CA.
func (s *Sidecar) WorkloadCertificate(ctx context.Context) (*x509.Certificate, error) {
	sock := filepath.Join(s.dir, "var/run/secrets/workload-spiffe-uds/socket")
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("framework: SDS of %s: %w", s.opts.Name, err)
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := secretv3.NewSecretDiscoveryServiceClient(conn).StreamSecrets(sctx)
	if err != nil {
		return nil, fmt.Errorf("framework: SDS of %s: %w", s.opts.Name, err)
	}
	req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: s.nodeID}, TypeUrl: sdsSecretType, ResourceNames: []string{"default"}}
	if err := stream.Send(req); err != nil {
		return nil, fmt.Errorf("framework: SDS of %s: %w", s.opts.Name, err)
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, fmt.Errorf("framework: SDS of %s: %w", s.opts.Name, err)
	}
	for _, r := range resp.GetResources() {
		sec := &tlsv3.Secret{}
		if err := r.UnmarshalTo(sec); err != nil {
			return nil, fmt.Errorf("framework: SDS of %s: %w", s.opts.Name, err)
		}
		if sec.GetName() != "default" {
			continue
		}
		block, _ := pem.Decode(sec.GetTlsCertificate().GetCertificateChain().GetInlineBytes())
		if block == nil {
			return nil, fmt.Errorf("framework: SDS of %s: secret default has no PEM certificate chain", s.opts.Name)
		}
		return x509.ParseCertificate(block.Bytes)
	}
	return nil, fmt.Errorf("framework: SDS of %s: no secret default in the response", s.opts.Name)
}
