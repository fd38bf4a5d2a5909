package federation

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/meshfed/meshfed/pkg/pki"
)

// ErrInvalidRoot means ParseRootPEM found no usable root certificate.
var ErrInvalidRoot = errors.New("federation: invalid root certificate")

// Root is one trusted root certificate of a trust domain.
type Root struct {
	// Fingerprint is the hex SHA-256 of the certificate's DER, lower case.
	Fingerprint string `json:"fingerprint"`
	// PEM is the certificate as one PEM CERTIFICATE block.
	PEM []byte `json:"pem"`
	// TrustDomain is the SPIFFE trust domain the root anchors.
	TrustDomain pki.TrustDomain `json:"trustDomain"`
	// Source is the replica that added the root.
	Source ReplicaID `json:"source"`
	// NotAfter is when the certificate expires; zero means never.
	NotAfter time.Time `json:"notAfter"`
	// Added is when the root was added; a tombstone removes it only if it
	// is not older.
	Added time.Time `json:"added"`
	// RetireAt, when set, is when the root stops being trusted: a root
	// dropped from its CA's configuration stays in the bundle until every
	// leaf it may have signed has expired (see Retire).
	RetireAt time.Time `json:"retireAt,omitzero"`
}

// Tombstone records the removal of a root certificate, in every trust
// domain, so that a late copy of it cannot come back.
type Tombstone struct {
	Fingerprint string    `json:"fingerprint"`
	Removed     time.Time `json:"removed"`
	Source      ReplicaID `json:"source"`
}

// TrustBundleState is the replicated content of a TrustBundle: roots
// sorted by trust domain then fingerprint, tombstones by fingerprint. It is
// what replicas send each other.
type TrustBundleState struct {
	Roots      []Root      `json:"roots"`
	Tombstones []Tombstone `json:"tombstones"`
}

// TrustBundle is the replicated set of trusted root certificates. Replicas
// merge their states by union; a root is live unless a tombstone of its
// fingerprint was removed at or after the time the root was added. Merging
// is commutative, associative and idempotent, so replicas that have seen the
// same adds and removes hold the same bundle whatever the order. Times are
// kept in UTC.
//
// The zero value is an empty bundle. A TrustBundle is not safe for
// concurrent use.
type TrustBundle struct {
	// roots holds the live roots. Per trust domain and fingerprint it keeps
	// the one added last (ties broken by the other fields), so that merge
	// picks the same one everywhere.
	roots map[rootKey]Root
	// tombs holds per fingerprint the latest removal.
	tombs map[string]Tombstone
}

type rootKey struct{ domain, fingerprint string }

// NewTrustBundle returns an empty bundle.
func NewTrustBundle() *TrustBundle { return &TrustBundle{} }

// Add adds root r and reports whether the bundle changed. It is refused
// (false) when a tombstone removed r's fingerprint at or after r.Added, when
// the bundle already holds r or a later-added copy of it, and when r has no
// fingerprint or trust domain.
func (b *TrustBundle) Add(r Root) bool {
	if r.Fingerprint == "" || r.TrustDomain == "" {
		return false
	}
	return b.addRoot(normRoot(r))
}

func (b *TrustBundle) addRoot(r Root) bool {
	if t, ok := b.tombs[r.Fingerprint]; ok && !t.Removed.Before(r.Added) {
		return false
	}
	k := rootKey{string(r.TrustDomain), r.Fingerprint}
	if old, ok := b.roots[k]; ok && compareRoots(r, old) <= 0 {
		return false
	}
	if b.roots == nil {
		b.roots = map[rootKey]Root{}
	}
	r.PEM = bytes.Clone(r.PEM)
	b.roots[k] = r
	return true
}

// Remove removes the root of fingerprint fp from every trust domain at time
// at, by replica by, and reports whether the bundle changed. The tombstone
// is kept even when no root has fp, so that a copy added earlier and
// delivered later stays out.
func (b *TrustBundle) Remove(fp string, at time.Time, by ReplicaID) bool {
	if fp == "" {
		return false
	}
	return b.addTomb(Tombstone{Fingerprint: fp, Removed: at.UTC(), Source: by})
}

func (b *TrustBundle) addTomb(t Tombstone) bool {
	if old, ok := b.tombs[t.Fingerprint]; ok && compareTombs(t, old) <= 0 {
		return false
	}
	if b.tombs == nil {
		b.tombs = map[string]Tombstone{}
	}
	b.tombs[t.Fingerprint] = t
	maps.DeleteFunc(b.roots, func(k rootKey, r Root) bool {
		return k.fingerprint == t.Fingerprint && !t.Removed.Before(r.Added)
	})
	return true
}

// Merge adds another replica's state to the bundle, the union of roots and
// of tombstones, and reports whether the bundle changed. Entries without a
// fingerprint (or roots without a trust domain) are ignored.
func (b *TrustBundle) Merge(o TrustBundleState) (changed bool) {
	for _, t := range o.Tombstones {
		if t.Fingerprint != "" && b.addTomb(normTomb(t)) {
			changed = true
		}
	}
	for _, r := range o.Roots {
		if r.Fingerprint != "" && r.TrustDomain != "" && b.addRoot(normRoot(r)) {
			changed = true
		}
	}
	return changed
}

// State returns the bundle's content, sorted, for replication. It shares
// nothing with the bundle.
func (b *TrustBundle) State() TrustBundleState {
	s := TrustBundleState{Roots: []Root{}, Tombstones: []Tombstone{}}
	for _, r := range b.roots {
		r.PEM = bytes.Clone(r.PEM)
		s.Roots = append(s.Roots, r)
	}
	sortRoots(s.Roots)
	for _, t := range b.tombs {
		s.Tombstones = append(s.Tombstones, t)
	}
	slices.SortFunc(s.Tombstones, func(a, b Tombstone) int { return strings.Compare(a.Fingerprint, b.Fingerprint) })
	return s
}

// Retire schedules the end of trust in the root of fingerprint fp, in
// every trust domain that holds it: from retireAt on, Roots leaves it out.
// It is recorded as a new copy of the root, added at at by replica by, so
// it replicates like an add and a later add without RetireAt (a rollback)
// wins over it. It reports whether the bundle changed; a root that is not
// live, or already retires at retireAt, is left alone.
func (b *TrustBundle) Retire(fp string, at, retireAt time.Time, by ReplicaID) bool {
	var copies []Root
	for k, r := range b.roots {
		if k.fingerprint == fp && !r.RetireAt.Equal(retireAt) {
			copies = append(copies, r)
		}
	}
	changed := false
	for _, r := range copies {
		r.Added, r.RetireAt, r.Source = at, retireAt, by
		if b.addRoot(normRoot(r)) {
			changed = true
		}
	}
	return changed
}

// Roots returns the live roots at now, neither expired nor retired, sorted
// by trust domain then fingerprint.
func (b *TrustBundle) Roots(now time.Time) []Root {
	var out []Root
	for _, r := range b.roots {
		if r.trustedAt(now) {
			r.PEM = bytes.Clone(r.PEM)
			out = append(out, r)
		}
	}
	sortRoots(out)
	return out
}

// NextChange returns the first time after now at which Roots will change
// by itself, a root expiring or retiring, or the zero time if none will.
func (b *TrustBundle) NextChange(now time.Time) time.Time {
	var next time.Time
	for _, r := range b.roots {
		for _, t := range []time.Time{r.NotAfter, r.RetireAt} {
			if t.After(now) && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
	}
	return next
}

// DropRetired turns every root whose retirement time has passed at now into
// a tombstone dated at that time, and reports whether the bundle changed.
// Every replica that calls it writes the same tombstone, so their bundles
// converge; a late copy of the root cannot come back.
func (b *TrustBundle) DropRetired(now time.Time) bool {
	var due []Root
	for _, r := range b.roots {
		if !r.RetireAt.IsZero() && !now.Before(r.RetireAt) {
			due = append(due, r)
		}
	}
	changed := false
	for _, r := range due {
		if b.addTomb(Tombstone{Fingerprint: r.Fingerprint, Removed: r.RetireAt, Source: r.Source}) {
			changed = true
		}
	}
	return changed
}

// trustedAt reports whether r is neither expired nor retired at now.
func (r Root) trustedAt(now time.Time) bool {
	return (r.NotAfter.IsZero() || now.Before(r.NotAfter)) && (r.RetireAt.IsZero() || now.Before(r.RetireAt))
}

// Hash returns a stable digest of State(), hex SHA-256 of a canonical
// encoding: replicas with the same bundle have the same hash, so gossip can
// carry the hash and a mismatch triggers a Merge.
func (b *TrustBundle) Hash() string {
	s := b.State()
	h := sha256.New()
	var buf []byte
	str := func(v string) {
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		buf = append(buf, v...)
	}
	tm := func(t time.Time) {
		buf = binary.AppendVarint(buf, t.Unix())
		buf = binary.AppendUvarint(buf, uint64(t.Nanosecond()))
	}
	str("meshfed.trust.v1")
	buf = binary.AppendUvarint(buf, uint64(len(s.Roots)))
	for _, r := range s.Roots {
		str(r.Fingerprint)
		str(string(r.PEM))
		str(string(r.TrustDomain))
		str(string(r.Source))
		tm(r.NotAfter)
		tm(r.Added)
		if !r.RetireAt.IsZero() {
			// Only when set, so bundles without retirements hash as
			// replicas that predate RetireAt hash them.
			tm(r.RetireAt)
		}
		h.Write(buf)
		buf = buf[:0]
	}
	buf = binary.AppendUvarint(buf, uint64(len(s.Tombstones)))
	for _, t := range s.Tombstones {
		str(t.Fingerprint)
		tm(t.Removed)
		str(string(t.Source))
	}
	h.Write(buf)
	return hex.EncodeToString(h.Sum(nil))
}

// PruneTombstones forgets the tombstones removed before the horizon before.
// Pick a horizon older than any message can be delayed: a copy of a pruned
// root added before its removal could otherwise come back.
func (b *TrustBundle) PruneTombstones(before time.Time) {
	maps.DeleteFunc(b.tombs, func(_ string, t Tombstone) bool { return t.Removed.Before(before) })
}

// ParseRootPEM parses the CERTIFICATE blocks of pemBytes into roots of
// trust domain domain, added by source at added. Text outside PEM blocks is
// ignored; a block of another type, a certificate that does not parse or is
// not a CA, or input with no certificate at all is an error wrapping
// ErrInvalidRoot that names the cause. A certificate repeated in the input
// is returned once.
func ParseRootPEM(pemBytes []byte, domain pki.TrustDomain, source ReplicaID, added time.Time) ([]Root, error) {
	if domain == "" {
		return nil, fmt.Errorf("no trust domain: %w", ErrInvalidRoot)
	}
	var out []Root
	seen := map[string]bool{}
	rest := pemBytes
	for i := 1; ; i++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is a %q, not a CERTIFICATE: %w", i, block.Type, ErrInvalidRoot)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w: %w", i, ErrInvalidRoot, err)
		}
		if !cert.IsCA {
			return nil, fmt.Errorf("PEM block %d (subject %q) is not a CA certificate: %w", i, cert.Subject, ErrInvalidRoot)
		}
		sum := sha256.Sum256(cert.Raw)
		fp := hex.EncodeToString(sum[:])
		if seen[fp] {
			continue
		}
		seen[fp] = true
		out = append(out, Root{
			Fingerprint: fp,
			PEM:         pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
			TrustDomain: domain,
			Source:      source,
			NotAfter:    cert.NotAfter.UTC(),
			Added:       added.UTC(),
		})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no PEM CERTIFICATE block in %d bytes: %w", len(pemBytes), ErrInvalidRoot)
	}
	return out, nil
}

// Verified returns s with only the roots that are what they say: each
// root's PEM parses (ParseRootPEM) as exactly one CA certificate whose
// fingerprint is the root's Fingerprint and whose expiry is its NotAfter,
// under a trust domain. It is for a state that came from elsewhere (a
// peer): a replica must not be able to add a non-CA, unparsable or
// mislabelled root to every replica's bundle. The error names each root
// left out (errors.Is ErrInvalidRoot); tombstones pass as they are.
func (s TrustBundleState) Verified() (TrustBundleState, error) {
	out := TrustBundleState{Roots: make([]Root, 0, len(s.Roots)), Tombstones: s.Tombstones}
	var errs []error
	for _, r := range s.Roots {
		if err := verifyRoot(r); err != nil {
			errs = append(errs, fmt.Errorf("root %.16q of trust domain %.64q: %w", r.Fingerprint, r.TrustDomain, err))
			continue
		}
		out.Roots = append(out.Roots, r)
	}
	return out, errors.Join(errs...)
}

// verifyRoot checks that r's PEM is one CA certificate that r describes.
func verifyRoot(r Root) error {
	parsed, err := ParseRootPEM(r.PEM, r.TrustDomain, r.Source, r.Added)
	switch {
	case err != nil:
		return err
	case len(parsed) != 1:
		return fmt.Errorf("%d certificates in one root: %w", len(parsed), ErrInvalidRoot)
	case parsed[0].Fingerprint != r.Fingerprint:
		return fmt.Errorf("its certificate's fingerprint is %s: %w", parsed[0].Fingerprint, ErrInvalidRoot)
	case !parsed[0].NotAfter.Equal(r.NotAfter):
		return fmt.Errorf("its certificate expires at %s, not %s: %w", parsed[0].NotAfter, r.NotAfter.UTC(), ErrInvalidRoot)
	}
	return nil
}

// compareRoots totally orders copies of one root: the later Added wins, and
// the other fields break ties so that every replica keeps the same copy.
func compareRoots(a, b Root) int {
	if c := a.Added.Compare(b.Added); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Source, b.Source); c != 0 {
		return c
	}
	if c := a.NotAfter.Compare(b.NotAfter); c != 0 {
		return c
	}
	if c := a.RetireAt.Compare(b.RetireAt); c != 0 {
		return c
	}
	return bytes.Compare(a.PEM, b.PEM)
}

// compareTombs orders removals of one fingerprint: the later one wins.
func compareTombs(a, b Tombstone) int {
	if c := a.Removed.Compare(b.Removed); c != 0 {
		return c
	}
	return cmp.Compare(a.Source, b.Source)
}

func sortRoots(rs []Root) {
	slices.SortFunc(rs, func(a, b Root) int {
		if c := strings.Compare(string(a.TrustDomain), string(b.TrustDomain)); c != 0 {
			return c
		}
		return strings.Compare(a.Fingerprint, b.Fingerprint)
	})
}

func normRoot(r Root) Root {
	r.NotAfter = r.NotAfter.UTC()
	r.Added = r.Added.UTC()
	r.RetireAt = r.RetireAt.UTC()
	return r
}

func normTomb(t Tombstone) Tombstone {
	t.Removed = t.Removed.UTC()
	return t
}
