package gossip

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// Reasons of meshfed_gossip_rejected_messages_total.
const (
	reasonDecrypt     = "decrypt"     // could not decrypt: wrong key, or encrypted while we have none
	reasonUnencrypted = "unencrypted" // plaintext while encryption is required
	reasonLabel       = "label"       // memberlist label mismatch
	reasonMalformed   = "malformed"   // undecodable message, bad checksum, unknown type
	reasonConflict    = "conflict"    // a node name claimed from a second address
	reasonState       = "state"       // push/pull state (our JSON) unreadable
	reasonMeta        = "meta"        // node metadata (our JSON) unreadable
	reasonUnexpected  = "unexpected"  // a user message; replicas send none
	reasonOther       = "other"       // a stream refused for another reason
)

var rejectionReasons = []string{
	reasonDecrypt, reasonUnencrypted, reasonLabel, reasonMalformed, reasonConflict,
	reasonState, reasonMeta, reasonUnexpected, reasonOther,
}

// rejectionPatterns map memberlist v0.7.0 log and error texts (lower-cased)
// to a reason; the first match wins. membership_test.go provokes most of
// them against a real memberlist, so an upgrade that rewords them fails
// there rather than silently counting nothing.
var rejectionPatterns = []struct{ substr, reason string }{
	// net.go ingestPacket / handleConn.
	{"unacceptable label", reasonLabel},
	{"unexpected double packet label header", reasonLabel},
	{"unexpected double stream label header", reasonLabel},
	// readStream, plaintext stream while GossipVerifyIncoming.
	{"encryption is configured but remote state is not encrypted", reasonUnencrypted},
	// decryptPayload (security.go), via "Decrypt packet failed: %v" for
	// UDP and "failed to receive: %s" for streams.
	{"decrypt packet failed", reasonDecrypt},
	{"no installed keys could decrypt", reasonDecrypt},
	{"unsupported encryption version", reasonDecrypt},
	{"payload is too small to decrypt", reasonDecrypt},
	{"cannot decrypt empty payload", reasonDecrypt},
	{"remote state is encrypted and encryption is not configured", reasonDecrypt},
	// Undecodable content from a peer that passed decryption (or with
	// encryption off).
	{"got invalid checksum", reasonMalformed},
	{"failed to decode", reasonMalformed},
	{"failed to decompress", reasonMalformed},
	{"missing message type byte", reasonMalformed},
	{"msg type (", reasonMalformed},     // "msg type (%d) not supported"
	{"message type (", reasonMalformed}, // "Message type (%d) not supported (packet handler)"
	{"received invalid msgtype", reasonMalformed},
	{"packet too short", reasonMalformed},
	{"cannot decode label", reasonMalformed},
	{"label header cannot be empty", reasonMalformed},
	{"failed to read remote state", reasonMalformed},
	{"larger than limit", reasonMalformed}, // a stream announcing more than 20 MB
	{"failed to receive user message", reasonMalformed},
	// state.go aliveNode: a second node under a live member's name.
	{"conflicting address for", reasonConflict},
	// Remaining refused streams (truncated, timed out).
	{"failed to receive:", reasonOther},
	{"failed push/pull merge", reasonOther},
}

// classifyRejection tells whether a memberlist log line or error reports
// refused inbound traffic, and why.
func classifyRejection(msg string) (string, bool) {
	lower := strings.ToLower(msg)
	for _, p := range rejectionPatterns {
		if strings.Contains(lower, p.substr) {
			return p.reason, true
		}
	}
	return "", false
}

// logWriter receives memberlist's log lines ("[LEVEL] memberlist: text"),
// one per Write, and passes them to logr: ERR as errors, WARN at V(0),
// INFO at V(1), DEBUG dropped. Lines that report refused traffic are
// counted.
type logWriter struct {
	log    logr.Logger
	reject func(reason string)
	closed *atomic.Bool // drop everything once set
}

func (w *logWriter) Write(p []byte) (int, error) {
	if w.closed.Load() {
		return len(p), nil
	}
	level, text := splitLogLine(strings.TrimRight(string(p), "\r\n"))
	if level == "DEBUG" {
		return len(p), nil
	}
	switch level {
	case "WARN":
		w.log.Info(text)
	case "INFO":
		w.log.V(1).Info(text)
	default: // ERR, ERROR, and unprefixed lines ("Err: ...")
		w.log.Error(nil, text)
	}
	if reason, ok := classifyRejection(text); ok {
		w.reject(reason)
	}
	return len(p), nil
}

// splitLogLine splits "[LEVEL] memberlist: text" into LEVEL and text.
func splitLogLine(line string) (level, text string) {
	if rest, ok := strings.CutPrefix(line, "["); ok {
		if lvl, after, ok := strings.Cut(rest, "] "); ok {
			level, line = lvl, after
		}
	}
	return level, strings.TrimPrefix(line, "memberlist: ")
}

type membershipMetrics struct {
	members  prometheus.Gauge
	events   *prometheus.CounterVec
	rejected *prometheus.CounterVec
	rejoins  *prometheus.CounterVec
}

func newMembershipMetrics() *membershipMetrics {
	m := &membershipMetrics{
		members: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshfed_gossip_members",
			Help: "Live gossip members this replica sees, itself included.",
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_gossip_member_events_total",
			Help: "Membership changes seen, by event (join, leave, update).",
		}, []string{"event"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_gossip_rejected_messages_total",
			Help: "Inbound gossip refused, by reason (decrypt, unencrypted, label, malformed, conflict, state, meta, unexpected, other).",
		}, []string{"reason"}),
		rejoins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_gossip_rejoins_total",
			Help: "Joins of members that went away and of the seeds, made while such members have not come back (partition healing), by result (contacted, failed).",
		}, []string{"result"}),
	}
	for _, r := range []string{"contacted", "failed"} {
		m.rejoins.WithLabelValues(r)
	}
	for _, e := range []string{"join", "leave", "update"} {
		m.events.WithLabelValues(e)
	}
	for _, r := range rejectionReasons {
		m.rejected.WithLabelValues(r)
	}
	return m
}

// register registers the metrics with reg (none if nil), all or nothing.
func (m *membershipMetrics) register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	cs := []prometheus.Collector{m.members, m.events, m.rejected, m.rejoins}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("gossip: register gossip metrics: %w", err)
		}
	}
	return nil
}

func (m *membershipMetrics) reject(reason string) { m.rejected.WithLabelValues(reason).Inc() }
