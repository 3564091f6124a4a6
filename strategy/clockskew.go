package strategy

import (
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxClockSkew is how far ahead of now a state may record an instant before
// Step reports it.
//
// now is the only clock of this package, and it must be a real instant, not
// the zero time. Every instant the state depends on is recorded, to the
// microsecond (what metav1.MicroTime keeps through JSON, see Micro), so a
// restarted controller resumes exactly where it stopped, and durations are
// measured from the recorded instants. Commands and Step must therefore
// share one clock. Every recorded instant bounds the clock from below (time
// that runs backwards counts as no time passing, and never causes progress
// nor a panic), so a state stamped by
// another clock than the one that steps it (a command given time.Now()
// while the Runner runs on a test clock, a controller whose clock was ahead)
// holds every time-gated event until now reaches that instant. Beyond
// MaxClockSkew Step reports Degraded with reason ClockSkew, and the Runner
// returns a *ClockSkewError; a smaller skew (clocks of two machines, a
// small step back of a clock) is only absorbed.
const MaxClockSkew = time.Minute

// ErrClockSkew is matched (errors.Is) by every *ClockSkewError.
var ErrClockSkew = errors.New("strategy: the state records an instant ahead of the clock")

// ClockSkewError reports the recorded instant of a state furthest ahead of
// now, when it is more than MaxClockSkew ahead.
type ClockSkewError struct {
	// Field is the JSON path of the instant, for example "lastCommandAt".
	Field string
	// At is the recorded instant; Now the clock it is ahead of.
	At, Now time.Time
}

func (e *ClockSkewError) Error() string {
	return fmt.Sprintf("strategy: the state's %s (%s) is %s ahead of now (%s): a command or a reconcile used another clock; "+
		"time-gated progress waits until the clock reaches it (give commands the Runner's clock)",
		e.Field, e.At.UTC().Format(time.RFC3339Nano), e.At.Sub(e.Now), e.Now.UTC().Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrClockSkew) true.
func (e *ClockSkewError) Is(target error) bool { return target == ErrClockSkew }

// CheckClock returns a *ClockSkewError when s records an instant more than
// MaxClockSkew ahead of now, nil otherwise. Step reports the same as the
// Degraded condition with reason ClockSkew (on a state that is not idle).
func (s *State) CheckClock(now time.Time) error {
	field, at := "", now
	for _, t := range [...]struct {
		name string
		at   *metav1.MicroTime
	}{
		{"startedAt", &s.StartedAt}, {"hopAt", &s.HopAt}, {"weightChangedAt", &s.WeightChangedAt},
		{"weightAppliedAt", &s.WeightAppliedAt}, {"weightPendingAt", &s.WeightPendingAt},
		{"stepStartedAt", &s.StepStartedAt}, {"reachedAt", &s.ReachedAt}, {"finishedAt", &s.FinishedAt},
		{"pausedAt", &s.PausedAt}, {"healthCheckedAt", &s.HealthCheckedAt}, {"lastCommandAt", &s.LastCommandAt},
		{"failingSince", &s.FailingSince},
	} {
		if t.at.Time.After(at) {
			field, at = t.name, t.at.Time
		}
	}
	if s.Aborted != nil && s.Aborted.At.Time.After(at) {
		field, at = "aborted.at", s.Aborted.At.Time
	}
	if at.Sub(now) <= MaxClockSkew {
		return nil
	}
	return &ClockSkewError{Field: field, At: at, Now: now}
}
