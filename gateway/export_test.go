package gateway

import (
	"time"

	"github.com/upshift-dev/upshift/internal/watchloop"
)

// SetWatchOptions makes the server close r's watches after timeout, and
// sets the shortest backoff before a new one.
func SetWatchOptions(r *Router, timeout, minBackoff time.Duration) {
	r.watchOpts = watchloop.Options{Timeout: timeout, MinBackoff: minBackoff}
}

// Watching returns the number of r's watch loops still running.
func Watching(r *Router) int64 { return r.watches.Running.Load() }

// Cached reports whether every route of r is read from its watch.
func Cached(r *Router) bool {
	for _, sh := range r.shared {
		if !sh.Cache.Fed() {
			return false
		}
	}
	return true
}

// StateRefused is how the AnnotationStore reads the API server's refusal
// of a write that carried the state.
var StateRefused = stateRefused

// ClaimRecord, RulesRecord and RuleHash are what the Router writes in a
// claim annotation and in the rules annotation.
type (
	ClaimRecord = claimRecord
	RulesRecord = rulesRecord
	RuleHash    = ruleHash
)
