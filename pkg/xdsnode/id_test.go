package xdsnode

import (
	"errors"
	"strings"
	"testing"
)

func TestSidecarID(t *testing.T) {
	got := SidecarID("10.0.0.1", "client-7d9", "demo", "cluster.local")
	if want := "sidecar~10.0.0.1~client-7d9.demo~demo.svc.cluster.local"; got != want {
		t.Errorf("SidecarID = %q, want %q", got, want)
	}
	id, err := ParseID(got)
	want := ID{Type: TypeSidecar, IP: "10.0.0.1", Name: "client-7d9.demo", Namespace: "demo", DNSDomain: "demo.svc.cluster.local"}
	if err != nil || id != want {
		t.Errorf("ParseID(%q) = %+v, %v; want %+v", got, id, err, want)
	}
	if !strings.Contains(got, NameField("client-7d9.demo")) {
		t.Errorf("%q lacks its name field %q", got, NameField("client-7d9.demo"))
	}
}

func TestParseID(t *testing.T) {
	for _, tc := range []struct {
		id, name, ns string
		ok           bool
	}{
		{"sidecar~10.0.0.1~client.demo~demo.svc.cluster.local", "client.demo", "demo", true},
		{"router~10.0.0.2~gw-7d9.istio-system~istio-system.svc.cluster.local", "gw-7d9.istio-system", "istio-system", true},
		{"sidecar~10.0.0.1~client.demo~", "client.demo", "demo", true},
		{"sidecar~~a.b.c~ns.svc.example.org", "a.b.c", "ns", true},
		{"sidecar~10.0.0.1~client~", "", "", false},
		{"sidecar~10.0.0.1~~demo.svc.cluster.local", "", "", false},
		{"~10.0.0.1~client.demo~demo.svc.cluster.local", "", "", false},
		{"sidecar~10.0.0.1~client.demo", "", "", false},
		{"sidecar~1~a.b~c~d", "", "", false},
		{"sidecar~1~a.b~.svc.cluster.local", "", "", false},
		{"my-grpc-client", "", "", false},
		{"", "", "", false},
	} {
		id, err := ParseID(tc.id)
		if (err == nil) != tc.ok || id.Name != tc.name || id.Namespace != tc.ns {
			t.Errorf("ParseID(%q) = %+v, %v; want name %q, namespace %q, ok %v", tc.id, id, err, tc.name, tc.ns, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidID) {
			t.Errorf("ParseID(%q): %v is not ErrInvalidID", tc.id, err)
		}
		if err == nil && id.String() != tc.id {
			t.Errorf("ParseID(%q).String() = %q", tc.id, id.String())
		}
		wantName := tc.name
		if !tc.ok {
			wantName = tc.id
		}
		if got := NameOf(tc.id); got != wantName {
			t.Errorf("NameOf(%q) = %q, want %q", tc.id, got, wantName)
		}
	}
}

// FuzzParseID: node IDs come from any client that opens a stream.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{
		"sidecar~10.0.0.1~client.demo~demo.svc.cluster.local",
		"sidecar~10.0.0.1~client.demo~",
		"router~::1~x~y",
		"~~~",
		"a~b~c~d~e",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidID) {
				t.Fatalf("ParseID(%q): %v is not ErrInvalidID", s, err)
			}
			if id != (ID{}) {
				t.Fatalf("ParseID(%q) failed but returned %+v", s, id)
			}
			if NameOf(s) != s {
				t.Fatalf("NameOf(%q) = %q, want the ID", s, NameOf(s))
			}
			return
		}
		if id.Type == "" || id.Name == "" || id.Namespace == "" {
			t.Fatalf("ParseID(%q) = %+v: empty type, name or namespace", s, id)
		}
		if strings.Contains(id.Name, "~") || strings.Contains(id.Namespace, "~") || strings.Contains(id.Namespace, ".") {
			t.Fatalf("ParseID(%q) = %+v: separators leaked", s, id)
		}
		if !strings.Contains(s, NameField(id.Name)) {
			t.Fatalf("name %q is not the third field of %q", id.Name, s)
		}
		if id.String() != s {
			t.Fatalf("ParseID(%q).String() = %q", s, id.String())
		}
		if again, err := ParseID(id.String()); err != nil || again != id {
			t.Fatalf("ParseID(String()) = %+v, %v; want %+v", again, err, id)
		}
	})
}
