package federation

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/pkg/pki"
)

// selfSignedRootPEM returns a PEM self-signed ECDSA P-256 certificate named cn,
// valid until notAfter, a CA when ca is set.
func selfSignedRootPEM(t testing.TB, cn string, notAfter time.Time, ca bool) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"meshfed test"}},
		NotBefore:             notAfter.Add(-24 * time.Hour),
		NotAfter:              notAfter,
		IsCA:                  ca,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// fakeRoot is a root whose PEM is a placeholder: the bundle does not look
// inside it.
func fakeRoot(fp, domain string, added time.Time) Root {
	return Root{
		Fingerprint: fp, PEM: []byte("pem of " + fp), TrustDomain: pki.TrustDomain(domain), Source: "hub-0",
		NotAfter: testNow.Add(365 * 24 * time.Hour), Added: added,
	}
}

func atSec(sec int) time.Time { return testNow.Add(time.Duration(sec) * time.Second) }

func fps(rs []Root) []string {
	var out []string
	for _, r := range rs {
		out = append(out, string(r.TrustDomain)+"/"+r.Fingerprint)
	}
	return out
}

func TestTrustZeroValueAndAdd(t *testing.T) {
	var b TrustBundle
	if got := b.Roots(testNow); got != nil {
		t.Fatalf("empty bundle roots: %v", got)
	}
	s := b.State()
	if len(s.Roots) != 0 || len(s.Tombstones) != 0 {
		t.Fatalf("empty state: %+v", s)
	}
	if NewTrustBundle().Hash() != b.Hash() {
		t.Fatal("zero value and NewTrustBundle hash differently")
	}
	r := fakeRoot("aa", "cluster.local", atSec(1))
	if !b.Add(r) {
		t.Fatal("Add refused a new root")
	}
	if b.Add(r) {
		t.Fatal("adding the same root twice changed the bundle")
	}
	if b.Add(fakeRoot("aa", "cluster.local", atSec(0))) {
		t.Fatal("an older copy replaced a newer one")
	}
	if !b.Add(fakeRoot("aa", "cluster.local", atSec(2))) {
		t.Fatal("a newer copy was refused")
	}
	if b.Add(fakeRoot("", "cluster.local", atSec(1))) || b.Add(fakeRoot("bb", "", atSec(1))) {
		t.Fatal("a root without fingerprint or trust domain was added")
	}
	// The bundle keeps its own copy of PEM.
	r.PEM[0] = 'X'
	if got := b.Roots(testNow); len(got) != 1 || got[0].PEM[0] != 'p' || !got[0].Added.Equal(atSec(2)) {
		t.Fatalf("roots = %+v", got)
	}
	b.Roots(testNow)[0].PEM[0] = 'Y'
	b.State().Roots[0].PEM[0] = 'Y'
	if b.Roots(testNow)[0].PEM[0] != 'p' {
		t.Fatal("Roots or State aliases the bundle's PEM")
	}
}

func TestTrustRemoveTombstones(t *testing.T) {
	var b TrustBundle
	b.Add(fakeRoot("aa", "cluster.local", atSec(1)))
	b.Add(fakeRoot("aa", "other.example", atSec(1))) // the same CA anchors two domains
	b.Add(fakeRoot("bb", "cluster.local", atSec(1)))

	if !b.Remove("aa", atSec(5), "hub-1") {
		t.Fatal("Remove changed nothing")
	}
	if got := fps(b.Roots(testNow)); !slices.Equal(got, []string{"cluster.local/bb"}) {
		t.Fatalf("after removing aa: %v", got)
	}
	if b.Remove("aa", atSec(4), "hub-2") {
		t.Fatal("an older removal replaced a newer one")
	}
	// A late Add of a copy added before the removal does not resurrect it,
	// nor does one added at the very instant of the removal.
	for _, added := range []time.Time{atSec(1), atSec(3), atSec(5)} {
		if b.Add(fakeRoot("aa", "cluster.local", added)) {
			t.Fatalf("root added at %v came back after its removal at %v", added, atSec(5))
		}
	}
	if b.Merge(TrustBundleState{Roots: []Root{fakeRoot("aa", "cluster.local", atSec(2))}}) {
		t.Fatal("a merged late root came back")
	}
	// Added again after the removal: live.
	if !b.Add(fakeRoot("aa", "cluster.local", atSec(6))) {
		t.Fatal("re-adding after the removal was refused")
	}
	if got := fps(b.Roots(testNow)); !slices.Equal(got, []string{"cluster.local/aa", "cluster.local/bb"}) {
		t.Fatalf("after re-adding aa: %v", got)
	}
	// A removal of a fingerprint never seen still stops its late arrival.
	if !b.Remove("cc", atSec(9), "hub-1") || b.Add(fakeRoot("cc", "cluster.local", atSec(8))) {
		t.Fatal("tombstone of an unknown fingerprint")
	}
	if b.Remove("", atSec(9), "hub-1") {
		t.Fatal("removed an empty fingerprint")
	}
	st := b.State()
	if len(st.Tombstones) != 2 || st.Tombstones[0].Fingerprint != "aa" || st.Tombstones[0].Source != "hub-1" || !st.Tombstones[0].Removed.Equal(atSec(5)) {
		t.Fatalf("tombstones = %+v", st.Tombstones)
	}
}

func TestTrustRootsExpiryAndOrder(t *testing.T) {
	var b TrustBundle
	expired := fakeRoot("01", "cluster.local", atSec(0))
	expired.NotAfter = atSec(10)
	forever := fakeRoot("ff", "a.example", atSec(0))
	forever.NotAfter = time.Time{}
	b.Add(expired)
	b.Add(forever)
	b.Add(fakeRoot("02", "cluster.local", atSec(0)))
	b.Add(fakeRoot("00", "z.example", atSec(0)))
	if got, want := fps(b.Roots(atSec(9))), []string{"a.example/ff", "cluster.local/01", "cluster.local/02", "z.example/00"}; !slices.Equal(got, want) {
		t.Fatalf("roots before expiry = %v, want %v", got, want)
	}
	// NotAfter is exclusive, as x509 treats it.
	if got, want := fps(b.Roots(atSec(10))), []string{"a.example/ff", "cluster.local/02", "z.example/00"}; !slices.Equal(got, want) {
		t.Fatalf("roots at expiry = %v, want %v", got, want)
	}
	// Expired roots are still replicated: expiry is a view, not a removal.
	if len(b.State().Roots) != 4 {
		t.Fatalf("state lost an expired root: %v", fps(b.State().Roots))
	}
}

// trustOp is one write to a bundle.
type trustOp struct {
	root   *Root
	remove *Tombstone
}

func (op trustOp) apply(b *TrustBundle) {
	if op.root != nil {
		b.Add(*op.root)
	} else {
		b.Remove(op.remove.Fingerprint, op.remove.Removed, op.remove.Source)
	}
}

func randomTrustOps(rng *mrand.Rand, n int) []trustOp {
	ops := make([]trustOp, n)
	for i := range ops {
		fp := fmt.Sprintf("%02x", rng.IntN(4))
		src := ReplicaID(fmt.Sprintf("hub-%d", rng.IntN(3)))
		when := atSec(rng.IntN(8))
		if rng.IntN(3) == 0 {
			ops[i].remove = &Tombstone{Fingerprint: fp, Removed: when, Source: src}
			continue
		}
		r := fakeRoot(fp, []string{"cluster.local", "other.example"}[rng.IntN(2)], when)
		r.Source = src
		ops[i].root = &r
	}
	return ops
}

// TestTrustMergeIsALattice: replicas that each saw some of the writes, in
// any order, merge into the same bundle whatever the merge order, and the
// same as one replica that saw every write; merging is idempotent.
func TestTrustMergeIsALattice(t *testing.T) {
	for seed := range uint64(300) {
		rng := mrand.New(mrand.NewPCG(seed, 7))
		ops := randomTrustOps(rng, 4+rng.IntN(16))

		all := NewTrustBundle()
		for _, i := range rng.Perm(len(ops)) {
			ops[i].apply(all)
		}
		want := all.State()

		// Split the writes among three replicas (some seen twice).
		parts := make([]*TrustBundle, 3)
		for i := range parts {
			parts[i] = NewTrustBundle()
		}
		for _, op := range ops {
			op.apply(parts[rng.IntN(3)])
			if rng.IntN(4) == 0 {
				op.apply(parts[rng.IntN(3)])
			}
		}
		for _, order := range [][]int{{0, 1, 2}, {2, 1, 0}, {1, 0, 2}, {1, 2, 0}} {
			m := NewTrustBundle()
			for _, i := range order {
				m.Merge(parts[i].State())
			}
			if got := m.State(); !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d order %v:\n%+v\nwant:\n%+v", seed, order, got, want)
			}
			if m.Hash() != all.Hash() {
				t.Fatalf("seed %d: equal states hash differently", seed)
			}
			if m.Merge(m.State()) || m.Merge(parts[order[0]].State()) {
				t.Fatalf("seed %d: merging what is already held changed the bundle", seed)
			}
		}
		// Associativity through pairwise merges: (0∪1)∪2 = 0∪(1∪2).
		left, right := NewTrustBundle(), NewTrustBundle()
		left.Merge(parts[0].State())
		left.Merge(parts[1].State())
		left.Merge(parts[2].State())
		right.Merge(parts[1].State())
		right.Merge(parts[2].State())
		p0 := NewTrustBundle()
		p0.Merge(parts[0].State())
		p0.Merge(right.State())
		if left.Hash() != p0.Hash() {
			t.Fatalf("seed %d: merge is not associative", seed)
		}
	}
}

func TestTrustMergeReportsChanges(t *testing.T) {
	a, b := NewTrustBundle(), NewTrustBundle()
	a.Add(fakeRoot("aa", "cluster.local", atSec(1)))
	if !b.Merge(a.State()) || b.Merge(a.State()) {
		t.Fatal("merge of a new root: changed should be true once")
	}
	a.Remove("aa", atSec(2), "hub-0")
	if !b.Merge(a.State()) || len(b.Roots(testNow)) != 0 {
		t.Fatal("merge of a tombstone did not remove the root")
	}
	// Invalid entries are ignored.
	if b.Merge(TrustBundleState{Roots: []Root{{TrustDomain: "x"}, {Fingerprint: "bb"}}, Tombstones: []Tombstone{{}}}) {
		t.Fatal("merged invalid entries")
	}
}

func TestTrustStateJSONAndHash(t *testing.T) {
	b := NewTrustBundle()
	b.Add(fakeRoot("bb", "cluster.local", atSec(1)))
	b.Add(fakeRoot("aa", "cluster.local", atSec(2)))
	b.Remove("cc", atSec(3), "hub-2")
	raw, err := json.Marshal(b.State())
	if err != nil {
		t.Fatal(err)
	}
	var decoded TrustBundleState
	if err := json.Unmarshal(raw, &decoded); err != nil {
		t.Fatal(err)
	}
	c := NewTrustBundle()
	c.Merge(decoded)
	if c.Hash() != b.Hash() || !reflect.DeepEqual(c.State(), b.State()) {
		t.Fatalf("JSON round trip changed the bundle:\n%s\n%+v", raw, c.State())
	}
	for _, key := range []string{`"roots"`, `"tombstones"`, `"fingerprint"`, `"trustDomain"`, `"notAfter"`, `"added"`, `"removed"`} {
		if !bytes.Contains(raw, []byte(key)) {
			t.Fatalf("JSON lacks %s: %s", key, raw)
		}
	}

	// The hash ignores insertion order and time zones, and sees every field.
	d := NewTrustBundle()
	d.Remove("cc", atSec(3).In(time.FixedZone("X", 3600)), "hub-2")
	r := fakeRoot("aa", "cluster.local", atSec(2).In(time.FixedZone("Y", -7200)))
	d.Add(r)
	d.Add(fakeRoot("bb", "cluster.local", atSec(1)))
	if d.Hash() != b.Hash() {
		t.Fatal("the same bundle built in another order and zone hashes differently")
	}
	seen := map[string]bool{b.Hash(): true}
	for name, mutate := range map[string]func(*Root){
		"pem":      func(r *Root) { r.PEM = []byte("other") },
		"source":   func(r *Root) { r.Source = "hub-9" },
		"notAfter": func(r *Root) { r.NotAfter = r.NotAfter.Add(time.Nanosecond) },
		"added":    func(r *Root) { r.Added = r.Added.Add(time.Nanosecond) },
	} {
		e := NewTrustBundle()
		e.Remove("cc", atSec(3), "hub-2")
		e.Add(fakeRoot("bb", "cluster.local", atSec(1)))
		r := fakeRoot("aa", "cluster.local", atSec(2))
		mutate(&r)
		e.Add(r)
		if seen[e.Hash()] {
			t.Fatalf("changing %s does not change the hash", name)
		}
		seen[e.Hash()] = true
	}
	if h := b.Hash(); len(h) != 64 {
		t.Fatalf("hash %q is not hex SHA-256", h)
	}
}

func TestTrustPruneTombstones(t *testing.T) {
	b := NewTrustBundle()
	b.Remove("aa", atSec(1), "hub-0")
	b.Remove("bb", atSec(5), "hub-0")
	b.PruneTombstones(atSec(5))
	st := b.State()
	if len(st.Tombstones) != 1 || st.Tombstones[0].Fingerprint != "bb" {
		t.Fatalf("tombstones after pruning = %+v", st.Tombstones)
	}
	// This is why the horizon must exceed any message delay: a pruned
	// removal no longer stops a late copy.
	if !b.Add(fakeRoot("aa", "cluster.local", atSec(0))) {
		t.Fatal("late root refused after its tombstone was pruned")
	}
	if b.Add(fakeRoot("bb", "cluster.local", atSec(4))) {
		t.Fatal("kept tombstone no longer refuses")
	}
	var zero TrustBundle
	zero.PruneTombstones(atSec(9)) // no panic on the zero value
}

func TestParseRootPEM(t *testing.T) {
	notAfter := time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC)
	ca1 := selfSignedRootPEM(t, "root one", notAfter, true)
	ca2 := selfSignedRootPEM(t, "root two", notAfter.Add(time.Hour), true)
	input := slices.Concat([]byte("subject=CN=root one\nissuer=CN=root one\n"), ca1, ca2, ca1, []byte("\ntrailing text\n"))
	added := atSec(7).In(time.FixedZone("Z", 3600))

	roots, err := ParseRootPEM(input, "cluster.local", "hub-1", added)
	if err != nil {
		t.Fatal(err)
	}
	if len(roots) != 2 {
		t.Fatalf("got %d roots, want 2 (the repeated one once)", len(roots))
	}
	for i, want := range [][]byte{ca1, ca2} {
		r := roots[i]
		block, _ := pem.Decode(want)
		sum := sha256.Sum256(block.Bytes)
		if r.Fingerprint != hex.EncodeToString(sum[:]) {
			t.Fatalf("root %d fingerprint %s", i, r.Fingerprint)
		}
		if !bytes.Equal(r.PEM, want) {
			t.Fatalf("root %d PEM:\n%s\nwant:\n%s", i, r.PEM, want)
		}
		if r.TrustDomain != "cluster.local" || r.Source != "hub-1" || !r.Added.Equal(added) || r.Added.Location() != time.UTC {
			t.Fatalf("root %d = %+v", i, r)
		}
	}
	if !roots[0].NotAfter.Equal(notAfter) || !roots[1].NotAfter.Equal(notAfter.Add(time.Hour)) {
		t.Fatalf("NotAfter = %v, %v", roots[0].NotAfter, roots[1].NotAfter)
	}
	// Parsed roots go straight into a bundle.
	var b TrustBundle
	for _, r := range roots {
		b.Add(r)
	}
	if len(b.Roots(notAfter.Add(-time.Hour))) != 2 || len(b.Roots(notAfter)) != 1 {
		t.Fatal("expiry of parsed roots")
	}
}

func TestParseRootPEMErrors(t *testing.T) {
	notAfter := time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC)
	ca := selfSignedRootPEM(t, "root", notAfter, true)
	leaf := selfSignedRootPEM(t, "workload", notAfter, false)
	key := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte{1, 2, 3}})
	corrupt := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")})
	tests := []struct {
		name, domain string
		in           []byte
		want         string
	}{
		{"garbage", "cluster.local", []byte("this is not PEM at all"), "no PEM CERTIFICATE block in 22 bytes"},
		{"empty", "cluster.local", nil, "no PEM CERTIFICATE block in 0 bytes"},
		{"private key", "cluster.local", slices.Concat(ca, key), `PEM block 2 is a "EC PRIVATE KEY", not a CERTIFICATE`},
		{"corrupt DER", "cluster.local", corrupt, "PEM block 1: federation: invalid root certificate: x509: "},
		{"leaf", "cluster.local", slices.Concat(ca, leaf), `PEM block 2 (subject "CN=workload,O=meshfed test") is not a CA certificate`},
		{"no domain", "", ca, "no trust domain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			roots, err := ParseRootPEM(tt.in, pki.TrustDomain(tt.domain), "hub-0", testNow)
			if !errors.Is(err, ErrInvalidRoot) || roots != nil {
				t.Fatalf("roots=%v err=%v, want ErrInvalidRoot", roots, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func FuzzParseRootPEM(f *testing.F) {
	notAfter := time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC)
	ca := selfSignedRootPEM(f, "root", notAfter, true)
	f.Add(ca)
	f.Add(slices.Concat(ca, selfSignedRootPEM(f, "root two", notAfter, true)))
	f.Add(selfSignedRootPEM(f, "leaf", notAfter, false))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte("garbage"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		roots, err := ParseRootPEM(in, "cluster.local", "hub-0", testNow)
		if err != nil {
			if !errors.Is(err, ErrInvalidRoot) || roots != nil {
				t.Fatalf("roots=%v err=%v", roots, err)
			}
			return
		}
		if len(roots) == 0 {
			t.Fatal("no roots and no error")
		}
		seen := map[string]bool{}
		b := NewTrustBundle()
		for _, r := range roots {
			if seen[r.Fingerprint] {
				t.Fatalf("fingerprint %s twice", r.Fingerprint)
			}
			seen[r.Fingerprint] = true
			// Each root's PEM parses back to the same fingerprint.
			again, err := ParseRootPEM(r.PEM, "cluster.local", "hub-0", testNow)
			if err != nil || len(again) != 1 || again[0].Fingerprint != r.Fingerprint {
				t.Fatalf("root %s does not round-trip: %v", r.Fingerprint, err)
			}
			if !b.Add(r) {
				t.Fatalf("bundle refused parsed root %s", r.Fingerprint)
			}
		}
	})
}

// Retirement: a retiring root stays trusted until its time, replicates like
// an add, is outranked by a later plain add (a rollback), and once due
// becomes the same tombstone on every replica.
func TestTrustRetire(t *testing.T) {
	var a TrustBundle
	a.Add(fakeRoot("old", "cluster.local", atSec(1)))
	a.Add(fakeRoot("new", "cluster.local", atSec(2)))
	if a.Retire("missing", atSec(3), atSec(100), "hub-1") {
		t.Fatal("retired a root the bundle does not hold")
	}
	if !a.Retire("old", atSec(3), atSec(100), "hub-1") {
		t.Fatal("Retire changed nothing")
	}
	if a.Retire("old", atSec(4), atSec(100), "hub-2") {
		t.Fatal("retiring again at the same time changed the bundle")
	}
	if got := fps(a.Roots(atSec(99))); !slices.Equal(got, []string{"cluster.local/new", "cluster.local/old"}) {
		t.Fatalf("before the retirement: %v", got)
	}
	if got := fps(a.Roots(atSec(100))); !slices.Equal(got, []string{"cluster.local/new"}) {
		t.Fatalf("at the retirement: %v", got)
	}
	if next := a.NextChange(atSec(50)); !next.Equal(atSec(100)) {
		t.Fatalf("NextChange = %v, want the retirement %v", next, atSec(100))
	}
	if next := a.NextChange(atSec(100)); !next.Equal(testNow.Add(365 * 24 * time.Hour)) {
		t.Fatalf("NextChange after the retirement = %v, want the roots' expiry", next)
	}

	// It replicates: a peer that merges sees the same retirement.
	var b TrustBundle
	b.Add(fakeRoot("old", "cluster.local", atSec(1)))
	if !b.Merge(a.State()) || b.Hash() != a.Hash() {
		t.Fatal("the retirement did not replicate")
	}
	// A rollback (the root is configured again) is a later plain add: it
	// wins over the retirement on every replica.
	if !b.Add(fakeRoot("old", "cluster.local", atSec(10))) {
		t.Fatal("rollback add refused")
	}
	a.Merge(b.State())
	if got := fps(a.Roots(atSec(200))); !slices.Equal(got, []string{"cluster.local/new", "cluster.local/old"}) {
		t.Fatalf("after the rollback: %v", got)
	}

	// Retired for good: DropRetired writes the same tombstone everywhere.
	a.Retire("old", atSec(20), atSec(100), "hub-1")
	b.Merge(a.State())
	if a.DropRetired(atSec(99)) {
		t.Fatal("dropped a root before its retirement")
	}
	if !a.DropRetired(atSec(101)) || !b.DropRetired(atSec(150)) {
		t.Fatal("DropRetired changed nothing")
	}
	if a.Hash() != b.Hash() {
		t.Fatalf("replicas that dropped at different times disagree:\n%+v\n%+v", a.State(), b.State())
	}
	if st := a.State(); len(st.Roots) != 1 || len(st.Tombstones) != 1 || !st.Tombstones[0].Removed.Equal(atSec(100)) {
		t.Fatalf("state after the drop = %+v", st)
	}
	// A late copy of the retired root added before its end stays out.
	if a.Add(fakeRoot("old", "cluster.local", atSec(50))) {
		t.Fatal("a late copy of a retired root came back")
	}
}

// A bundle without retirements hashes as before RetireAt existed, so
// replicas of mixed versions agree during an upgrade.
func TestTrustHashWithoutRetirementIsStable(t *testing.T) {
	var a TrustBundle
	a.Add(fakeRoot("aa", "cluster.local", atSec(1)))
	before := a.Hash()
	a.Retire("aa", atSec(2), atSec(9), "hub-1")
	if a.Hash() == before {
		t.Fatal("a retirement did not change the hash")
	}
	var b TrustBundle
	b.Add(fakeRoot("aa", "cluster.local", atSec(1)))
	if b.Hash() != before {
		t.Fatal("hash not deterministic")
	}
}

// TestVerifiedRoots: of a peer's bundle, only roots that are one CA
// certificate matching their fingerprint and expiry pass; each other is
// named in the error, and tombstones pass.
func TestVerifiedRoots(t *testing.T) {
	notAfter := time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC)
	good, err := ParseRootPEM(selfSignedRootPEM(t, "root", notAfter, true), "cluster.local", "hub-1", testNow)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ParseRootPEM(selfSignedRootPEM(t, "other", notAfter, true), "cluster.local", "hub-1", testNow)
	if err != nil {
		t.Fatal(err)
	}
	leaf := good[0]
	leaf.PEM = selfSignedRootPEM(t, "leaf", notAfter, false)
	mislabelled := other[0]
	mislabelled.Fingerprint = good[0].Fingerprint
	later := good[0]
	later.NotAfter = notAfter.Add(time.Hour)
	two := other[0]
	two.PEM = slices.Concat(other[0].PEM, good[0].PEM)
	garbage := good[0]
	garbage.PEM = []byte("not a certificate")
	noDomain := good[0]
	noDomain.TrustDomain = ""
	in := TrustBundleState{
		Roots:      []Root{good[0], leaf, mislabelled, later, two, garbage, noDomain},
		Tombstones: []Tombstone{{Fingerprint: "aa", Removed: testNow}},
	}
	out, err := in.Verified()
	if !errors.Is(err, ErrInvalidRoot) {
		t.Fatalf("error %v, want ErrInvalidRoot", err)
	}
	if len(out.Roots) != 1 || out.Roots[0].Fingerprint != good[0].Fingerprint {
		t.Fatalf("verified roots %v, want only the good one", fps(out.Roots))
	}
	if len(out.Tombstones) != 1 {
		t.Errorf("tombstones %v, want them kept", out.Tombstones)
	}
	for _, says := range []string{"not a CA", "fingerprint is", "expires at", "2 certificates", "no PEM CERTIFICATE", "no trust domain"} {
		if !strings.Contains(err.Error(), says) {
			t.Errorf("error %q does not say %q", err, says)
		}
	}
}

// FuzzVerifiedBundle: whatever a peer sends as its bundle (JSON), the
// verified state merges without panicking and holds only roots whose PEM
// is a CA certificate of their fingerprint.
func FuzzVerifiedBundle(f *testing.F) {
	notAfter := time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC)
	roots, err := ParseRootPEM(selfSignedRootPEM(f, "root", notAfter, true), "cluster.local", "hub-1", testNow)
	if err != nil {
		f.Fatal(err)
	}
	seed, err := json.Marshal(TrustBundleState{Roots: roots, Tombstones: []Tombstone{{Fingerprint: "aa", Removed: testNow}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(`{"roots":[{"fingerprint":"aa","pem":"","trustDomain":"x"}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var st TrustBundleState
		if json.Unmarshal(in, &st) != nil {
			return
		}
		v, err := st.Verified()
		if err == nil && len(v.Roots) != len(st.Roots) {
			t.Fatalf("%d of %d roots kept and no error", len(v.Roots), len(st.Roots))
		}
		b := NewTrustBundle()
		b.Merge(v)
		for _, r := range b.State().Roots {
			again, err := ParseRootPEM(r.PEM, r.TrustDomain, r.Source, r.Added)
			if err != nil || len(again) != 1 || again[0].Fingerprint != r.Fingerprint {
				t.Fatalf("merged root %s is not what it says: %v", r.Fingerprint, err)
			}
		}
	})
}
