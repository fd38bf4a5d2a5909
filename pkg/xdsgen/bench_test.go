package xdsgen

import (
	"fmt"
	"net/netip"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/pkg/model"
)

// benchService returns echo with n ready endpoints (one port) spread evenly
// over three clusters: cluster-1 and cluster-2 in us-east, cluster-3 in
// eu-west, three zones each.
func benchService(n int) *model.MergedService {
	clusters := []struct {
		id     model.ClusterID
		region string
	}{{"cluster-1", "us-east"}, {"cluster-2", "us-east"}, {"cluster-3", "eu-west"}}
	eps := make([]model.Endpoint, n)
	for i := range eps {
		c := clusters[i%len(clusters)]
		eps[i] = model.Endpoint{
			Cluster:  c.id,
			Address:  netip.AddrFrom4([4]byte{10, byte(i % 3), byte(i >> 8), byte(i)}),
			Locality: model.Locality{Region: c.region, Zone: fmt.Sprintf("%s-%d", c.region, i/3%3)},
			Ready:    true,
			Ports:    map[string]uint32{"grpc": 50051},
		}
	}
	ms := merged(eps...)
	ms.Service.Ports = ms.Service.Ports[:1]
	return ms
}

func benchmarkLoadAssignments(b *testing.B, n int) {
	ms := benchService(n)
	b.ReportAllocs()
	for b.Loop() {
		LoadAssignments(ms, groupEast, nil)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/endpoint")
}

func BenchmarkLoadAssignments1k(b *testing.B)  { benchmarkLoadAssignments(b, 1_000) }
func BenchmarkLoadAssignments10k(b *testing.B) { benchmarkLoadAssignments(b, 10_000) }

func benchmarkMarshal(b *testing.B, n int) {
	cla := LoadAssignments(benchService(n), groupEast, nil)[0]
	var size int
	b.ReportAllocs()
	for b.Loop() {
		bytes, err := proto.Marshal(cla)
		if err != nil {
			b.Fatal(err)
		}
		size = len(bytes)
	}
	b.ReportMetric(float64(size)/float64(n), "bytes/endpoint")
}

func BenchmarkMarshalLoadAssignment1k(b *testing.B)  { benchmarkMarshal(b, 1_000) }
func BenchmarkMarshalLoadAssignment10k(b *testing.B) { benchmarkMarshal(b, 10_000) }
