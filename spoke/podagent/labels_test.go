package podagent_test

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/spoke/podagent"
)

func TestParseLabels(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    map[string]string
		wantErr string // substring; empty: no error
	}{
		{name: "empty file", in: "", want: map[string]string{}},
		{name: "blank lines", in: "\n\n", want: map[string]string{}},
		{name: "kubelet's format", in: "app=\"client\"\nistio-locality=\"us-east1.us-east1-b\"\nsecurity.istio.io/tlsMode=\"istio\"",
			want: map[string]string{"app": "client", "istio-locality": "us-east1.us-east1-b", "security.istio.io/tlsMode": "istio"}},
		{name: "trailing newline and CRLF", in: "a=\"1\"\r\nb=\"2\"\n", want: map[string]string{"a": "1", "b": "2"}},
		{name: "escaped quote", in: `a="x\"y"`, want: map[string]string{"a": `x"y`}},
		{name: "escapes", in: `a="tab\tnl\nuni\u00e9bs\\"`, want: map[string]string{"a": "tab\tnl\nuni\u00e9bs\\"}},
		{name: "equals in value", in: `a="k=v"`, want: map[string]string{"a": "k=v"}},
		{name: "empty value", in: `a=""`, want: map[string]string{"a": ""}},
		{name: "no equals", in: "a=\"1\"\njunk", wantErr: "line 2"},
		{name: "unquoted value", in: "a=\"1\"\nb=\"2\"\nc=3", wantErr: "line 3"},
		{name: "single quotes", in: `a='1'`, wantErr: "line 1"},
		{name: "unterminated", in: "\n" + `a="1`, wantErr: "line 2"},
		{name: "bad escape", in: `a="\q"`, wantErr: "line 1"},
		{name: "empty key", in: `="1"`, wantErr: "line 1"},
		{name: "repeated key", in: "a=\"1\"\na=\"2\"", wantErr: "line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := podagent.ParseLabels([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// formatLabels writes labels as the kubelet writes the downward API file.
func formatLabels(labels map[string]string) string {
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		lines = append(lines, k+"="+strconv.Quote(labels[k]))
	}
	return strings.Join(lines, "\n")
}

func FuzzParseLabels(f *testing.F) {
	f.Add(formatLabels(map[string]string{"app": "a", "istio-locality": "r.z.s"}))
	f.Add(`a="x\"y"`)
	f.Add("a=\"1\"\nb")
	f.Fuzz(func(t *testing.T, in string) {
		labels, err := podagent.ParseLabels([]byte(in))
		if err != nil {
			return
		}
		// What parses, written back as the kubelet would, parses the same.
		again, err := podagent.ParseLabels([]byte(formatLabels(labels)))
		if err != nil {
			t.Fatalf("rewritten labels refused: %v", err)
		}
		if !maps.Equal(labels, again) {
			t.Fatalf("round trip: %q, then %q", labels, again)
		}
	})
}
