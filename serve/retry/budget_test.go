package retry_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/serve/retry"
)

func TestBudgetZeroValueDefaults(t *testing.T) {
	var b retry.Budget
	if got := b.Tokens(); got != retry.DefaultMaxTokens {
		t.Errorf("zero Budget starts with %v tokens, want %v", got, retry.DefaultMaxTokens)
	}
	if err := b.Validate(); err != nil {
		t.Errorf("zero Budget invalid: %v", err)
	}
}

func TestBudgetValidate(t *testing.T) {
	for _, b := range []*retry.Budget{{MaxTokens: -1}, {TokenRatio: -0.1}, {TokenRatio: 1.5}} {
		if err := b.Validate(); !errors.Is(err, retry.ErrInvalid) {
			t.Errorf("%+v: Validate() = %v, want ErrInvalid", b, err)
		}
	}
}

// failingCalls runs n calls against an always-refusing backend sharing b,
// from `workers` goroutines, and returns the number of retries made.
func failingCalls(t tb, b *retry.Budget, n, workers int, what outcome) int {
	t.Helper()
	var attempts atomic.Int64
	var wg sync.WaitGroup
	jobs := make(chan int)
	for range workers {
		wg.Go(func() {
			for range jobs {
				clk := newFakeClock()
				base := &fakeBase{clk: clk, script: repeat(what, 1000)}
				rt := &retry.Transport{Base: base, Budget: b, MaxAttempts: 1000, Clock: clk, Jitter: half}
				res, err := rt.RoundTrip(newRequestNoTB("GET"))
				if err == nil {
					_ = res.Body.Close()
				}
				attempts.Add(int64(len(base.records())))
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return int(attempts.Load()) - n
}

func repeat(o outcome, n int) []outcome {
	s := make([]outcome, n)
	for i := range s {
		s[i] = o
	}
	return s
}

// Property: over N failing calls, however many clients share the budget,
// the retries stay below MaxTokens/2.
func TestPropertyBudgetBound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		maxTokens := float64(rapid.IntRange(1, 200).Draw(t, "maxTokens"))
		ratio := rapid.Float64Range(0.01, 1).Draw(t, "ratio")
		n := rapid.IntRange(1, 60).Draw(t, "calls")
		workers := rapid.IntRange(1, 8).Draw(t, "workers")
		what := rapid.SampledFrom([]outcome{dialRefused, refused503, plain503}).Draw(t, "failure")
		b := &retry.Budget{MaxTokens: maxTokens, TokenRatio: ratio}
		retries := failingCalls(t, b, n, workers, what)
		if float64(2*retries) >= maxTokens && retries > 0 {
			t.Fatalf("%d retries over %d failing calls with MaxTokens %v: bound is < %v", retries, n, maxTokens, maxTokens/2)
		}
		if tok := b.Tokens(); tok < 0 || tok > maxTokens {
			t.Fatalf("tokens %v outside [0, %v]", tok, maxTokens)
		}
	})
}

func TestBudgetRecoversWithSuccess(t *testing.T) {
	b := &retry.Budget{MaxTokens: 10, TokenRatio: 1}
	if r := failingCalls(t, b, 20, 1, plain503); r != 4 {
		t.Errorf("retries while failing = %d, want 4 (tokens 10 -> 5)", r)
	}
	clk := newFakeClock()
	for range 10 { // successes refill the bucket
		rt := &retry.Transport{Base: &fakeBase{clk: clk}, Budget: b, Clock: clk}
		res, err := rt.RoundTrip(newRequestNoTB("GET"))
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
	}
	if got := b.Tokens(); got != 10 {
		t.Errorf("tokens after 10 successes = %v, want 10 (capped)", got)
	}
	base := &fakeBase{clk: clk, script: []outcome{plain503, ok200}}
	rt := &retry.Transport{Base: base, Budget: b, Clock: clk, Jitter: half}
	if _, err := rt.RoundTrip(newRequestNoTB("GET")); err != nil || len(base.records()) != 2 {
		t.Errorf("after recovery: %v, %d attempts; want a retry", err, len(base.records()))
	}
}
