package csds

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// ErrInvalidMatcher is returned for a node matcher that cannot be evaluated.
var ErrInvalidMatcher = errors.New("csds: invalid node matcher")

// Matcher evaluates the node matchers of a ClientStatusRequest: a node
// matches if any NodeMatcher matches it (none means every node), and a
// NodeMatcher matches if its node_id matcher and all its node_metadatas do.
type Matcher struct {
	any []nodeMatcher
}

type nodeMatcher struct {
	id       func(string) bool // nil: any ID
	metadata []func(*structpb.Struct) bool
}

// NewMatcher compiles ms. It supports every StringMatcher but custom ones,
// and every ValueMatcher.
func NewMatcher(ms []*matcherv3.NodeMatcher) (*Matcher, error) {
	m := &Matcher{}
	for i, nm := range ms {
		var c nodeMatcher
		if nm.GetNodeId() != nil {
			f, err := stringMatch(nm.GetNodeId())
			if err != nil {
				return nil, fmt.Errorf("%w: node_matchers[%d].node_id: %w", ErrInvalidMatcher, i, err)
			}
			c.id = f
		}
		for j, sm := range nm.GetNodeMetadatas() {
			f, err := structMatch(sm)
			if err != nil {
				return nil, fmt.Errorf("%w: node_matchers[%d].node_metadatas[%d]: %w", ErrInvalidMatcher, i, j, err)
			}
			c.metadata = append(c.metadata, f)
		}
		m.any = append(m.any, c)
	}
	return m, nil
}

// Match reports whether node matches.
func (m *Matcher) Match(node *corev3.Node) bool {
	if len(m.any) == 0 {
		return true
	}
	for _, c := range m.any {
		if c.match(node) {
			return true
		}
	}
	return false
}

func (c nodeMatcher) match(node *corev3.Node) bool {
	if c.id != nil && !c.id(node.GetId()) {
		return false
	}
	for _, f := range c.metadata {
		if !f(node.GetMetadata()) {
			return false
		}
	}
	return true
}

func stringMatch(sm *matcherv3.StringMatcher) (func(string) bool, error) {
	fold := func(s string) string { return s }
	if sm.GetIgnoreCase() {
		fold = strings.ToLower
	}
	switch p := sm.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		want := fold(p.Exact)
		return func(s string) bool { return fold(s) == want }, nil
	case *matcherv3.StringMatcher_Prefix:
		want := fold(p.Prefix)
		return func(s string) bool { return strings.HasPrefix(fold(s), want) }, nil
	case *matcherv3.StringMatcher_Suffix:
		want := fold(p.Suffix)
		return func(s string) bool { return strings.HasSuffix(fold(s), want) }, nil
	case *matcherv3.StringMatcher_Contains:
		want := fold(p.Contains)
		return func(s string) bool { return strings.Contains(fold(s), want) }, nil
	case *matcherv3.StringMatcher_SafeRegex:
		// Envoy's safe_regex must match the whole string; Go's regexp is
		// RE2 as Envoy's is.
		re, err := regexp.Compile(`^(?:` + p.SafeRegex.GetRegex() + `)$`)
		if err != nil {
			return nil, fmt.Errorf("safe_regex: %w", err)
		}
		return re.MatchString, nil
	case nil:
		return nil, errors.New("no match pattern")
	default:
		return nil, fmt.Errorf("unsupported string matcher %T", p)
	}
}

func structMatch(sm *matcherv3.StructMatcher) (func(*structpb.Struct) bool, error) {
	if len(sm.GetPath()) == 0 {
		return nil, errors.New("empty path")
	}
	var path []string
	for _, seg := range sm.GetPath() {
		if seg.GetKey() == "" {
			return nil, errors.New("path segment without a key")
		}
		path = append(path, seg.GetKey())
	}
	vm, err := valueMatch(sm.GetValue())
	if err != nil {
		return nil, err
	}
	return func(s *structpb.Struct) bool {
		var v *structpb.Value
		for i, k := range path {
			v = s.GetFields()[k]
			if v == nil {
				return vm(nil)
			}
			if i < len(path)-1 {
				s = v.GetStructValue()
				if s == nil {
					return vm(nil)
				}
			}
		}
		return vm(v)
	}, nil
}

// valueMatch compiles vm; the function it returns is given nil for a
// missing value.
func valueMatch(vm *matcherv3.ValueMatcher) (func(*structpb.Value) bool, error) {
	switch p := vm.GetMatchPattern().(type) {
	case *matcherv3.ValueMatcher_NullMatch_:
		return func(v *structpb.Value) bool {
			_, ok := v.GetKind().(*structpb.Value_NullValue)
			return ok
		}, nil
	case *matcherv3.ValueMatcher_DoubleMatch:
		return doubleMatch(p.DoubleMatch)
	case *matcherv3.ValueMatcher_StringMatch:
		f, err := stringMatch(p.StringMatch)
		if err != nil {
			return nil, err
		}
		return func(v *structpb.Value) bool {
			s, ok := v.GetKind().(*structpb.Value_StringValue)
			return ok && f(s.StringValue)
		}, nil
	case *matcherv3.ValueMatcher_BoolMatch:
		return func(v *structpb.Value) bool {
			b, ok := v.GetKind().(*structpb.Value_BoolValue)
			return ok && b.BoolValue == p.BoolMatch
		}, nil
	case *matcherv3.ValueMatcher_PresentMatch:
		return func(v *structpb.Value) bool { return (v != nil) == p.PresentMatch }, nil
	case *matcherv3.ValueMatcher_ListMatch:
		one, err := valueMatch(p.ListMatch.GetOneOf())
		if err != nil {
			return nil, fmt.Errorf("list_match: %w", err)
		}
		return func(v *structpb.Value) bool {
			for _, e := range v.GetListValue().GetValues() {
				if one(e) {
					return true
				}
			}
			return false
		}, nil
	case *matcherv3.ValueMatcher_OrMatch:
		var fs []func(*structpb.Value) bool
		for _, sub := range p.OrMatch.GetValueMatchers() {
			f, err := valueMatch(sub)
			if err != nil {
				return nil, fmt.Errorf("or_match: %w", err)
			}
			fs = append(fs, f)
		}
		return func(v *structpb.Value) bool {
			for _, f := range fs {
				if f(v) {
					return true
				}
			}
			return false
		}, nil
	case nil:
		return nil, errors.New("no value match pattern")
	default:
		return nil, fmt.Errorf("unsupported value matcher %T", p)
	}
}

func doubleMatch(dm *matcherv3.DoubleMatcher) (func(*structpb.Value) bool, error) {
	var f func(float64) bool
	switch p := dm.GetMatchPattern().(type) {
	case *matcherv3.DoubleMatcher_Exact:
		f = func(x float64) bool { return x == p.Exact }
	case *matcherv3.DoubleMatcher_Range:
		f = func(x float64) bool { return x >= p.Range.GetStart() && x < p.Range.GetEnd() }
	default:
		return nil, fmt.Errorf("unsupported double matcher %T", p)
	}
	return func(v *structpb.Value) bool {
		n, ok := v.GetKind().(*structpb.Value_NumberValue)
		return ok && f(n.NumberValue)
	}, nil
}
