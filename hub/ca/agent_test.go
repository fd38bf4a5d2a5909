package ca_test

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/pkg/agent"
)

// The workload agent of pkg/agent gets its certificate from the real CA
// with a real token and writes the files grpc-go's file_watcher reads.
func TestAgentAgainstServer(t *testing.T) {
	f := startFleet(t)
	s := startCA(t, f, caConfig{})
	token := f.cluster("cluster-2").token(t, "demo", "echo", []string{ca.DefaultAudience}, nil)
	dir := t.TempDir()
	a, err := agent.New(agent.Options{
		CAAddr: s.conn.Target(), CARoots: s.keys.Roots(), ClusterID: "cluster-2",
		TokenFunc: func(context.Context) (string, error) { return token, nil },
		Dir:       dir, TTL: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-a.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("no certificate")
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, agent.CertChainFile), filepath.Join(dir, agent.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if cert.Leaf.URIs[0].String() != echoID {
		t.Errorf("URI %v, want %s", cert.Leaf.URIs, echoID)
	}
}
