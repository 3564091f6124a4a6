package ray

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/upshift-dev/upshift/clock"
)

// answers keeps the most recent answer of a cluster's dashboard to a GET
// of its applications, for the reads that may reuse it (see
// Config.ReadMaxAge). Every GET of the adapter goes through it: the reads'
// own, the poller's and the writes' pre-reads; every PUT tells it.
type answers struct {
	clk clock.Clock
	// maxAge is the age below which an answer is reused; <= 0: never.
	maxAge time.Duration

	mu sync.Mutex
	// last is the most recent answer kept; nil when none may be reused
	// (none yet, or a write since).
	last *answer
	// writing counts the PUTs in flight; gen counts the starts and ends of
	// PUTs. A GET's answer is kept only if no PUT was in flight when it
	// was sent and none started or ended before it was answered: it then
	// shows the cluster after the adapter's last write.
	writing int
	gen     uint64
}

// answer is one decoded GET answer and the instant the GET was sent: what
// the cluster was at most that long ago, as far as the adapter can tell.
// It is shared by every caller that reuses it, who must not modify it.
type answer struct {
	d  *instanceDetails
	at time.Time
}

func newAnswers(c *Config, notifyMax time.Duration) *answers {
	a := &answers{clk: clock.OrReal(c.Clock), maxAge: c.ReadMaxAge}
	if a.maxAge == 0 {
		a.maxAge = notifyMax
	}
	return a
}

// fresh returns the answer kept if it is younger than the max age.
func (a *answers) fresh() *instanceDetails {
	if a.maxAge <= 0 {
		return nil
	}
	now := a.clk.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil || now.Sub(a.last.at) >= a.maxAge {
		return nil
	}
	return a.last.d
}

// sending notes a GET about to be sent: the instant, and what keep needs
// to tell whether a PUT came in between.
func (a *answers) sending() (at time.Time, gen uint64, clean bool) {
	at = a.clk.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	return at, a.gen, a.writing == 0
}

// keep keeps d, the answer to a GET that sending noted, unless a PUT was
// in flight when it was sent or started or ended since, or the answer kept
// is younger.
func (a *answers) keep(d *instanceDetails, at time.Time, gen uint64, clean bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !clean || gen != a.gen || a.last != nil && at.Before(a.last.at) {
		return
	}
	a.last = &answer{d: d, at: at}
}

// write brackets a PUT: the answer kept is dropped when it starts, and no
// GET sent before it ends is kept. The returned func ends it, whether the
// PUT succeeded or not (a failed PUT may still have been applied).
func (a *answers) write() (done func()) {
	a.mu.Lock()
	a.writing++
	a.gen++
	a.last = nil
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		a.writing--
		a.gen++
		a.last = nil
		a.mu.Unlock()
	}
}

// read returns the applications as the reads see them: the answer kept
// while fresh, else a GET's.
func (r *Ray) read(ctx context.Context) (*instanceDetails, error) {
	if d := r.answers.fresh(); d != nil {
		return d, nil
	}
	return r.get(ctx)
}

// get sends a GET of the applications, whatever is kept, and keeps its
// answer for the reads. An error is never kept.
func (r *Ray) get(ctx context.Context) (*instanceDetails, error) {
	at, gen, clean := r.answers.sending()
	b, err := r.do(ctx, http.MethodGet, r.getURL, nil)
	if err != nil {
		return nil, err
	}
	d, err := decodeInstanceDetails(b)
	if err != nil {
		return nil, err
	}
	r.answers.keep(d, at, gen, clean)
	return d, nil
}

// put sends a PUT of the Serve config body.
func (r *Ray) put(ctx context.Context, body []byte) error {
	done := r.answers.write()
	defer done()
	_, err := r.do(ctx, http.MethodPut, r.putURL, body)
	return err
}
