package spoke

import (
	"encoding/json"
	"testing"
)

func TestCABundlePatch(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n")
	if p := caBundlePatch([][]byte{ca, ca}, ca); p != nil {
		t.Fatalf("nothing to change, got patch %s", p)
	}
	p := caBundlePatch([][]byte{ca, nil, []byte("stale")}, ca)
	var ops []struct {
		Op, Path string
		Value    []byte
	}
	if err := json.Unmarshal(p, &ops); err != nil {
		t.Fatal(err)
	}
	if len(ops) != 2 || ops[0].Path != "/webhooks/1/clientConfig/caBundle" || ops[1].Path != "/webhooks/2/clientConfig/caBundle" ||
		string(ops[0].Value) != string(ca) || ops[0].Op != "add" {
		t.Fatalf("patch = %s", p)
	}
}
