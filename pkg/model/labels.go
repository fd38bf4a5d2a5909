package model

import (
	"encoding/binary"
	"encoding/json"
	"iter"
	"slices"
	"strings"
	"unique"
)

// Labels is an immutable set of Kubernetes labels (an endpoint's Pod
// labels), interned: every Labels built from the same key/value pairs, in
// any process-wide place (a cluster watcher, a peer frame, a JSON
// document), refers to one shared copy. An endpoint therefore pays one
// pointer for its labels, and the endpoints of one Deployment share one
// label set however many of them there are (BenchmarkLabelsMemory measures
// it against a map per endpoint).
//
// Labels is comparable: == (and Equal) is true exactly when the two hold the
// same pairs, and costs a pointer comparison, so a Labels can key a map that
// memoizes per distinct label set. The zero value is the empty set. Its
// methods are safe for concurrent use.
type Labels struct {
	// h is the interned canonical encoding (see appendLabelString); the zero
	// handle is the empty set. unique drops an encoding once no handle
	// refers to it any more, so label sets that disappear from the fleet
	// do not accumulate.
	h unique.Handle[string]
}

// NewLabels returns the interned set of m's pairs; nil or empty m gives the
// zero Labels. m is not retained.
func NewLabels(m map[string]string) Labels {
	if len(m) == 0 {
		return Labels{}
	}
	// Pods carry a handful of labels: sort and encode them on the stack, so
	// that interning a set already known does not allocate
	// (BenchmarkNewLabels).
	var keyStack [16]string
	keys := keyStack[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var bufStack [512]byte
	buf := bufStack[:0]
	for _, k := range keys {
		buf = appendLabelString(buf, k)
		buf = appendLabelString(buf, m[k])
	}
	return Labels{h: unique.Make(string(buf))}
}

// The canonical encoding of a label set is its pairs sorted by key, each key
// and each value written as a uvarint length and the bytes. Lengths rather
// than separators, since labels that come from peers or JSON may hold any
// byte; the encoding is only ever read by this file.
func appendLabelString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

// readLabelString reads one string of the encoding at the head of enc and
// returns it (a substring of enc: no copy) and the rest.
func readLabelString(enc string) (s, rest string) {
	n, w := uvarintString(enc)
	return enc[w : w+int(n)], enc[w+int(n):]
}

// uvarintString is binary.Uvarint over a string, without copying it into a
// []byte. The encoding is written by appendLabelString only, so it is never
// malformed.
func uvarintString(s string) (uint64, int) {
	var x uint64
	var shift uint
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b < 0x80 {
			return x | uint64(b)<<shift, i + 1
		}
		x |= uint64(b&0x7f) << shift
		shift += 7
	}
	return x, len(s)
}

func (l Labels) encoding() string {
	if l.h == (unique.Handle[string]{}) {
		return ""
	}
	return l.h.Value()
}

// IsZero reports whether l has no labels.
func (l Labels) IsZero() bool { return l.h == (unique.Handle[string]{}) }

// Len returns the number of labels.
func (l Labels) Len() int {
	n := 0
	for range l.All() {
		n++
	}
	return n
}

// All yields the pairs in key order. The strings share the interned
// storage.
func (l Labels) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		enc := l.encoding()
		for enc != "" {
			var k, v string
			k, enc = readLabelString(enc)
			v, enc = readLabelString(enc)
			if !yield(k, v) {
				return
			}
		}
	}
}

// Get returns the value of label key and whether l has it.
func (l Labels) Get(key string) (string, bool) {
	enc := l.encoding()
	for enc != "" {
		var k, v string
		k, enc = readLabelString(enc)
		v, enc = readLabelString(enc)
		switch c := strings.Compare(k, key); {
		case c == 0:
			return v, true
		case c > 0:
			return "", false // keys are sorted: key is not further on
		}
	}
	return "", false
}

// Match reports whether l has every key of selector with the same value, as
// a DestinationRule subset or a Service selector selects (an empty selector
// matches every set, the empty one included).
func (l Labels) Match(selector map[string]string) bool {
	for k, want := range selector {
		if v, ok := l.Get(k); !ok || v != want {
			return false
		}
	}
	return true
}

// Equal reports whether l and o hold the same pairs; it is l == o.
func (l Labels) Equal(o Labels) bool { return l == o }

// Map returns the labels as a new map (nil for the empty set), for callers
// that need one; prefer Get, Match and All, which do not allocate.
func (l Labels) Map() map[string]string {
	if l.IsZero() {
		return nil
	}
	m := map[string]string{}
	for k, v := range l.All() {
		m[k] = v
	}
	return m
}

// String returns "k1=v1,k2=v2" in key order, for logs and test failures.
func (l Labels) String() string {
	var b strings.Builder
	for k, v := range l.All() {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(v)
	}
	return b.String()
}

// MarshalJSON writes l as a JSON object in key order, the shape a
// map[string]string has (so /debug/registryz readers see Pod labels as
// Kubernetes writes them).
func (l Labels) MarshalJSON() ([]byte, error) {
	buf := []byte{'{'}
	for k, v := range l.All() {
		if len(buf) > 1 {
			buf = append(buf, ',')
		}
		// Marshalling a string cannot fail.
		kj, _ := json.Marshal(k)
		vj, _ := json.Marshal(v)
		buf = append(append(append(buf, kj...), ':'), vj...)
	}
	return append(buf, '}'), nil
}

// UnmarshalJSON reads a JSON object of strings (or null, the empty set) and
// interns it.
func (l *Labels) UnmarshalJSON(data []byte) error {
	var m map[string]string
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*l = NewLabels(m)
	return nil
}

// Topology labels: where a workload runs. Nodes carry region and zone (the
// cluster watcher reads an endpoint's Locality from them); Istio gives every
// endpoint all four, derived from its cluster and locality, so that
// DestinationRule subsets and failoverPriority can select on them.
const (
	LabelTopologyCluster = "topology.istio.io/cluster"
	LabelTopologyRegion  = "topology.kubernetes.io/region"
	LabelTopologyZone    = "topology.kubernetes.io/zone"
	LabelTopologySubZone = "topology.istio.io/subzone"
)
