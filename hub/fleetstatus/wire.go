package fleetstatus

import (
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/proxystatus"
)

// batch is the wire form of the fleet status one replica sends the others
// (federation.PeerMessage.ProxyStatus, JSON): its own records only.
type batch struct {
	// Full replaces everything known of the sender (sent on connect).
	Full    bool                 `json:"full,omitempty"`
	Changed []proxystatus.Record `json:"changed,omitempty"`
	// Removed are the node IDs of the sender's proxies that are gone.
	Removed []string `json:"removed,omitempty"`
	// Spokes, when present, replaces the sender's spoke list (always in a
	// full batch; in others only when it changed).
	Spokes *[]debugdoc.Spoke `json:"spokes,omitempty"`
}
