package strategy

import (
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// micro is the recorded form of an instant: UTC, microseconds, exactly what a
// JSON round trip of metav1.MicroTime preserves.
//
// It is built from an integer so that no *time.Location of the caller's is
// written into the state: that keeps Step free of heap allocations.
func micro(t time.Time) metav1.MicroTime {
	return metav1.MicroTime{Time: time.UnixMicro(t.UnixMicro()).UTC()}
}

// Micro returns an instant in the form a State records it: UTC, to the
// microsecond, which is what a JSON round trip of metav1.MicroTime keeps.
// Write instants into a State (observations, gate verdicts) with it, so that
// storing the state changes no decision.
func Micro(t time.Time) metav1.MicroTime { return micro(t) }

func after(t metav1.MicroTime, d time.Duration) time.Time { return t.Time.Add(d) }

// clock returns now, or the latest instant recorded in s if now is earlier:
// time that runs backwards counts as no time passing.
func clock(s *State, now time.Time) time.Time {
	for _, t := range [...]*metav1.MicroTime{&s.StartedAt, &s.HopAt, &s.WeightChangedAt, &s.WeightAppliedAt, &s.WeightPendingAt, &s.StepStartedAt,
		&s.ReachedAt, &s.FinishedAt, &s.PausedAt, &s.HealthCheckedAt, &s.LastCommandAt, &s.FailingSince} {
		if t.Time.After(now) {
			now = t.Time
		}
	}
	if s.Aborted != nil && s.Aborted.At.Time.After(now) {
		now = s.Aborted.At.Time
	}
	return now
}

// setShort sets *dst to "<role> ready capacity <ready> is below its traffic
// <traffic>: holding", building the string only when *dst differs.
func setShort(dst *string, role string, ready, traffic int32) {
	var buf [80]byte
	b := append(buf[:0], role...)
	b = append(b, " ready capacity "...)
	b = strconv.AppendInt(b, int64(ready), 10)
	b = append(b, " is below its traffic "...)
	b = strconv.AppendInt(b, int64(traffic), 10)
	b = append(b, ": holding"...)
	if string(b) != *dst {
		*dst = string(b)
	}
}
