package federation

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/meshfed/meshfed/pkg/model"
)

func hubIDs(n int) []ReplicaID {
	out := make([]ReplicaID, n)
	for i := range out {
		out[i] = ReplicaID(fmt.Sprintf("hub-%d", i))
	}
	return out
}

func testClusterIDs(n int) []model.ClusterID {
	out := make([]model.ClusterID, n)
	for i := range out {
		out[i] = model.ClusterID(fmt.Sprintf("cluster-%04d", i))
	}
	return out
}

func TestScoreIsFNV1aThenFinalizer(t *testing.T) {
	h := fnv.New64a()
	h.Write([]byte("c1\x00hub-0"))
	k := h.Sum64()
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	if got := score("c1", "hub-0"); got != k {
		t.Fatalf("score = %#x, want %#x", got, k)
	}
}

func TestOwnersDeterministicAndOrderIndependent(t *testing.T) {
	members := hubIDs(7)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range testClusterIDs(200) {
		for _, n := range []int{1, 2, 3, 7, 9} {
			want := Owners(c, members, n)
			if len(want) != min(n, len(members)) {
				t.Fatalf("%s n=%d: %d owners", c, n, len(want))
			}
			shuffled := slices.Clone(members)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			// Duplicates count once.
			shuffled = append(shuffled, shuffled[:3]...)
			if got := Owners(c, shuffled, n); !slices.Equal(got, want) {
				t.Fatalf("%s n=%d: owners %v of shuffled members, want %v", c, n, got, want)
			}
			// A prefix of a longer ranking: owners are in rank order.
			if all := Owners(c, members, len(members)); !slices.Equal(all[:len(want)], want) {
				t.Fatalf("%s n=%d: %v is not a prefix of the ranking %v", c, n, want, all)
			}
			for _, m := range members {
				if got := Owns(m, c, shuffled, n); got != slices.Contains(want, m) {
					t.Fatalf("%s n=%d: Owns(%s) = %v, owners %v", c, n, m, got, want)
				}
			}
		}
	}
}

func TestOwnersEdgeCases(t *testing.T) {
	if got := Owners("c", nil, 1); got != nil {
		t.Fatalf("no members: %v", got)
	}
	if got := Owners("c", hubIDs(3), 0); got != nil {
		t.Fatalf("n=0: %v", got)
	}
	if got := Owners("c", []ReplicaID{"a", "a", "a"}, 2); !slices.Equal(got, []ReplicaID{"a"}) {
		t.Fatalf("duplicates: %v", got)
	}
	if Owns("x", "c", hubIDs(3), 3) {
		t.Fatal("a non-member owns a cluster")
	}
	if Owns("hub-0", "c", hubIDs(3), 0) {
		t.Fatal("n=0 owns a cluster")
	}
	// Ties (impossible to find by search, so forced here) are broken by ID.
	a, b := scored{id: "a", score: 7}, scored{id: "b", score: 7}
	if compareScored(a, b) >= 0 || compareScored(b, a) <= 0 {
		t.Fatal("ties are not broken by the lower ID")
	}
}

func TestOwnersBalance(t *testing.T) {
	members := hubIDs(5)
	for _, n := range []int{1, 2} {
		counts := map[ReplicaID]int{}
		for _, c := range testClusterIDs(1000) {
			for _, o := range Owners(c, members, n) {
				counts[o]++
			}
		}
		want := 1000 * n / len(members)
		for _, m := range members {
			if got := counts[m]; got < want-60*n || got > want+60*n {
				t.Errorf("n=%d: %s owns %d clusters, want %d±%d (all: %v)", n, m, got, want, 60*n, counts)
			}
		}
	}
}

func TestOwnersMinimalMovement(t *testing.T) {
	clusters := testClusterIDs(1000)
	five, six := hubIDs(5), hubIDs(6)
	added := six[5]
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			moved := 0
			for _, c := range clusters {
				before, after := Owners(c, five, n), Owners(c, six, n)
				if slices.Equal(before, after) {
					continue
				}
				moved++
				// Adding a member: the only newcomer among the owners is the
				// added member, and it keeps the others' relative order.
				if !slices.Contains(after, added) {
					t.Fatalf("%s: owners %v -> %v without the added member", c, before, after)
				}
				rest := slices.DeleteFunc(slices.Clone(after), func(r ReplicaID) bool { return r == added })
				if !slices.Equal(rest, before[:n-1]) {
					t.Fatalf("%s: owners %v -> %v moved more than the added member's slot", c, before, after)
				}
				// Removing it again restores the old owners.
				if back := Owners(c, five, n); !slices.Equal(back, before) {
					t.Fatalf("%s: removing %s gives %v, want %v", c, added, back, before)
				}
			}
			// The added member takes about n/6 of the owner slots.
			want := 1000 * n / 6
			if moved < want-60*n || moved > want+60*n {
				t.Fatalf("adding a 6th member moved %d clusters, want about %d", moved, want)
			}
		})
	}
}

func TestOwnersRemovalMovesOnlyItsClusters(t *testing.T) {
	clusters := testClusterIDs(1000)
	six := hubIDs(6)
	gone := six[2]
	five := slices.DeleteFunc(slices.Clone(six), func(r ReplicaID) bool { return r == gone })
	for _, n := range []int{1, 2} {
		for _, c := range clusters {
			before, after := Owners(c, six, n), Owners(c, five, n)
			if !slices.Contains(before, gone) {
				if !slices.Equal(before, after) {
					t.Fatalf("n=%d %s: owners %v -> %v though %s did not own it", n, c, before, after, gone)
				}
				continue
			}
			// The survivors keep their slots, in order, and one member is
			// promoted into the last one.
			kept := slices.DeleteFunc(slices.Clone(before), func(r ReplicaID) bool { return r == gone })
			if !slices.Equal(after[:n-1], kept) {
				t.Fatalf("n=%d %s: owners %v -> %v", n, c, before, after)
			}
		}
	}
}

func BenchmarkOwners(b *testing.B) {
	members := hubIDs(5)
	for b.Loop() {
		Owners("cluster-0001", members, 2)
	}
}
