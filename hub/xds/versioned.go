package xds

import (
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"

	"github.com/meshfed/meshfed/hub/xds/xdsstatus"
)

// versioned is a watch cache that the config ledger observes: its versions
// carry the prefix of its ID there (xdsstatus.VersionPrefix).
type versioned struct {
	*watchCache
	id uint64
}

// newCache returns a cache of typeURL holding initial (nil for none),
// observed by l: its first version holds the sealed epoch, so its writer
// holds the push lock, or initial is empty.
func newCache(l *xdsstatus.Ledger, typeURL string, initial map[string]types.Resource) *versioned {
	id := l.Reserve()
	v := &versioned{watchCache: newWatchCache(typeURL, xdsstatus.VersionPrefix(id), initial), id: id}
	l.Observe(id, v)
	return v
}

// newCacheAt returns a cache of typeURL holding initial, built apart from
// the planners from the configuration of epoch (see apart.go), observed by
// l until it is adopted as holding that epoch.
func newCacheAt(l *xdsstatus.Ledger, typeURL string, initial map[string]types.Resource, epoch uint64) *versioned {
	id := l.Reserve()
	v := &versioned{watchCache: newWatchCache(typeURL, xdsstatus.VersionPrefix(id), initial), id: id}
	l.ObserveApart(id, v, epoch)
	return v
}
