package replicas

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

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

// Cached reports whether s reads its workload from the watch.
func Cached(s *Setter) bool { return s.shared.Cache.Fed() }

// Name is the name of s's workload.
func Name(s *Setter) string { return s.name }

// CachedVersion is the resourceVersion s reads from its watch, "" when it
// reads the API server.
func CachedVersion(s *Setter) string {
	obj, ok := s.shared.Cache.Get()
	if !ok || obj == nil {
		return ""
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetResourceVersion()
}
