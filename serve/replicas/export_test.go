package replicas

import (
	"time"

	"github.com/upshift-dev/upshift/internal/watchloop"
)

// SetWatchOptions makes the server close s's watches after timeout, and
// sets the shortest backoff before a new one.
func SetWatchOptions(s *Setter, timeout, minBackoff time.Duration) {
	s.watchOpts = watchloop.Options{Timeout: timeout, MinBackoff: minBackoff}
}

// Watching returns the number of s's watch loops still running, and the
// watch requests made.
func Watching(s *Setter) (running, requests int64) {
	return s.watches.Running.Load(), s.watches.Watches.Load()
}

// FullFor is fullFor, for the tests.
var FullFor = fullFor
