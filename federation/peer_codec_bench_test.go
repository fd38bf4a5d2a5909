package federation_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/pkg/model"
)

// benchSnapshot is a cluster of services × 20 endpoints, each endpoint
// with a Pod, a service account, a locality and the labels an
// Istio-injected Deployment's Pods carry (one set per service), as a
// watcher lists them.
func benchSnapshot(endpoints int) *federation.PeerMessage {
	const perService = 20
	snap := &federation.ClusterSnapshot{
		Cluster: "cluster-1", Version: federation.Version{Term: 7, Seq: 0, Owner: "hub-0"},
		Shards: map[model.Hostname]*model.ServiceShard{}, Sent: time.Unix(1_750_000_000, 0),
	}
	for s := 0; s*perService < endpoints; s++ {
		h := model.Hostname(fmt.Sprintf("svc-%d.ns-%d.svc.cluster.local", s, s%10))
		sh := &model.ServiceShard{Service: &model.Service{Hostname: h, Name: fmt.Sprintf("svc-%d", s), Namespace: fmt.Sprintf("ns-%d", s%10),
			Ports: []model.ServicePort{{Name: "grpc", Port: 8080, Protocol: model.ProtocolGRPC}}}}
		labels := model.NewLabels(map[string]string{"app": fmt.Sprintf("svc-%d", s), "version": "v1",
			"pod-template-hash": fmt.Sprintf("7d%06x", s), "security.istio.io/tlsMode": "istio",
			"service.istio.io/canonical-name": fmt.Sprintf("svc-%d", s), "service.istio.io/canonical-revision": "v1"})
		for e := 0; e < perService; e++ {
			i := s*perService + e
			sh.Endpoints = append(sh.Endpoints, model.Endpoint{
				Cluster: "cluster-1", Address: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}),
				Locality: model.Locality{Region: "region-1", Zone: fmt.Sprintf("zone-%d", i%3)}, Ready: true,
				ServiceAccount: fmt.Sprintf("sa-%d", s), Pod: fmt.Sprintf("svc-%d-%d", s, e), Labels: labels, Ports: map[string]uint32{"grpc": 18080},
			})
		}
		snap.Shards[h] = sh
	}
	return &federation.PeerMessage{Snapshot: snap}
}

// BenchmarkSnapshotCodec compares the peer stream's snapshot encoding
// before (JSON, protocol 1) and after (protobuf, protocol 2), side by side:
// time per encode and decode, and the frame's size (wire-bytes).
func BenchmarkSnapshotCodec(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		m := benchSnapshot(n)
		jsonData, err := json.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		protoData, err := federation.EncodePeerMessage(m)
		if err != nil {
			b.Fatal(err)
		}
		name := fmt.Sprintf("%dk", n/1000)
		// Both paths validate, as the transport does before sending.
		b.Run("json/encode/"+name, func(b *testing.B) {
			for b.Loop() {
				if err := m.Validate(); err != nil {
					b.Fatal(err)
				}
				if _, err := json.Marshal(m); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(jsonData)), "wire-bytes")
		})
		b.Run("proto/encode/"+name, func(b *testing.B) {
			for b.Loop() {
				if _, err := federation.EncodePeerMessage(m); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(protoData)), "wire-bytes")
		})
		b.Run("json/decode/"+name, func(b *testing.B) {
			for b.Loop() {
				var out federation.PeerMessage
				if err := json.Unmarshal(jsonData, &out); err != nil {
					b.Fatal(err)
				}
				if err := out.Validate(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(jsonData)), "wire-bytes")
		})
		b.Run("proto/decode/"+name, func(b *testing.B) {
			for b.Loop() {
				if _, err := federation.DecodePeerMessage(protoData); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(protoData)), "wire-bytes")
		})
	}
}
