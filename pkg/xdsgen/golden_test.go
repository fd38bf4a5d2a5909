package xdsgen

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// section is one named list of resources in a golden file.
type section struct {
	name string
	msgs []proto.Message
}

func asMessages[M proto.Message](ms []M) []proto.Message {
	out := make([]proto.Message, len(ms))
	for i, m := range ms {
		out[i] = m
	}
	return out
}

// render writes sections as one JSON object, keys in the given order. The
// protojson output deliberately varies its whitespace between runs, so it is
// compacted and re-indented with encoding/json, which is stable.
func render(t *testing.T, sections ...section) []byte {
	t.Helper()
	mo := protojson.MarshalOptions{Multiline: true, Indent: "  "}
	var raw bytes.Buffer
	raw.WriteByte('{')
	for i, s := range sections {
		if i > 0 {
			raw.WriteByte(',')
		}
		key, _ := json.Marshal(s.name)
		raw.Write(key)
		raw.WriteString(":[")
		for j, m := range s.msgs {
			if j > 0 {
				raw.WriteByte(',')
			}
			b, err := mo.Marshal(m)
			if err != nil {
				t.Fatalf("protojson: %v", err)
			}
			raw.Write(b)
		}
		raw.WriteByte(']')
	}
	raw.WriteByte('}')
	var compact, out bytes.Buffer
	if err := json.Compact(&compact, raw.Bytes()); err != nil {
		t.Fatalf("compact: %v", err)
	}
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		t.Fatalf("indent: %v", err)
	}
	out.WriteByte('\n')
	return out.Bytes()
}

// checkGolden compares got with testdata/<name>.golden, or rewrites it when
// the test runs with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	testutil.Golden(t, filepath.Join("testdata", name+".golden"), got)
}

func TestGoldenService(t *testing.T) {
	svc := echoService()
	got := render(t,
		section{"listeners", asMessages(Listeners(svc))},
		section{"routes", asMessages(Routes(svc, istioconfig.HostConfig{}, ""))},
		section{"clusters", asMessages(Clusters(svc, nil))},
	)
	checkGolden(t, "service_two_ports", got)
}

func TestGoldenLoadAssignments(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ms    *model.MergedService
		group ProxyGroup
	}{
		// cluster-1 (two zones) → 0, cluster-2 (same region) → 1,
		// cluster-3 (eu-west) → 2.
		{"eds_priorities", fleet(true), groupEast},
		// Nothing ready in cluster-1: cluster-2 → 0, cluster-3 → 1.
		{"eds_renumbered", fleet(false), groupEast},
		// A proxy without a region: cluster-1 → 0, everything else → 1.
		{"eds_no_region", fleet(true), groupNoZone},
		// Unready endpoints are left out, even in the proxy's own cluster.
		{"eds_unready", merged(
			ep("cluster-1", "10.1.0.1", usEast1a, true),
			ep("cluster-1", "10.1.0.2", usEast1a, false),
			ep("cluster-2", "10.2.0.1", usEast1a, false),
			ep("cluster-3", "10.3.0.1", euWest1a, true),
		), groupEast},
		// 10.1.0.2 names only the grpc port, so it serves 8080 but not 9090.
		{"eds_missing_port", merged(
			ep("cluster-1", "10.1.0.1", usEast1a, true),
			ep("cluster-1", "10.1.0.2", usEast1a, true, "grpc", 50051),
			ep("cluster-2", "10.2.0.1", usEast1a, true, "metrics", 9102),
		), groupEast},
		// No ready endpoint at all: named assignments without endpoints.
		{"eds_no_ready", merged(
			ep("cluster-1", "10.1.0.1", usEast1a, false),
			ep("cluster-3", "10.3.0.1", euWest1a, false),
		), groupEast},
		// The same address claimed by two clusters is sent once, in the
		// closer priority.
		{"eds_duplicate_address", merged(
			ep("cluster-1", "10.0.0.1", usEast1a, true),
			ep("cluster-3", "10.0.0.1", euWest1a, true),
			ep("cluster-3", "10.3.0.1", euWest1a, true),
		), groupEast},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clas := LoadAssignments(tc.ms, tc.group, nil)
			checkGolden(t, tc.name, render(t, section{"clusterLoadAssignments", asMessages(clas)}))
		})
	}
}
