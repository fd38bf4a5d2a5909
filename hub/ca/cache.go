package ca

import (
	"container/list"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/meshfed/meshfed/pkg/model"
)

// reviewKey identifies a reviewed token: the SHA-256 of the token (the
// token itself is never kept) and the cluster that reviewed it. The same
// token is a different key in another cluster, since only its issuer can
// vouch for it.
type reviewKey struct {
	cluster model.ClusterID
	sum     [sha256.Size]byte
}

func newReviewKey(cluster model.ClusterID, token string) reviewKey {
	return reviewKey{cluster: cluster, sum: sha256.Sum256([]byte(token))}
}

type reviewEntry struct {
	key     reviewKey
	id      Identity
	expires time.Time
}

// reviewCache remembers successful token reviews until they expire, holding
// at most size entries and evicting the least recently used. It is pure: the
// caller passes the time. Safe for concurrent use.
type reviewCache struct {
	size int

	mu    sync.Mutex // guards lru and items
	lru   *list.List // of *reviewEntry, most recently used first
	items map[reviewKey]*list.Element
}

func newReviewCache(size int) *reviewCache {
	return &reviewCache{size: size, lru: list.New(), items: map[reviewKey]*list.Element{}}
}

// get returns the identity cached for k if it has not expired at now.
func (c *reviewCache) get(k reviewKey, now time.Time) (Identity, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[k]
	if !ok {
		return Identity{}, false
	}
	e := el.Value.(*reviewEntry)
	if !now.Before(e.expires) {
		c.removeLocked(el)
		return Identity{}, false
	}
	c.lru.MoveToFront(el)
	return e.id, true
}

// put caches id for k until expires, evicting the least recently used
// entry when full.
func (c *reviewCache) put(k reviewKey, id Identity, expires time.Time) {
	if c.size <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		e := el.Value.(*reviewEntry)
		e.id, e.expires = id, expires
		c.lru.MoveToFront(el)
		return
	}
	for c.lru.Len() >= c.size {
		c.removeLocked(c.lru.Back())
	}
	c.items[k] = c.lru.PushFront(&reviewEntry{key: k, id: id, expires: expires})
}

// len returns the number of entries, expired ones included.
func (c *reviewCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

func (c *reviewCache) removeLocked(el *list.Element) {
	c.lru.Remove(el)
	delete(c.items, el.Value.(*reviewEntry).key)
}
