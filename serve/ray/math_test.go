package serve_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve"
)

func pct(v float64) *float64 { return &v }

// Hand-computed cases of Ray's capacity-adjusted replica count.
func TestCapacityAdjusted(t *testing.T) {
	cases := []struct {
		n    int64
		tc   *float64
		want int64
		why  string
	}{
		{3, pct(40), 1, "1.2 rounds to 1"},
		{1, pct(1), 1, "0.01 rounds to 0, but never below 1"},
		{10, pct(25), 3, "2.5 rounds half up"},
		{10, pct(0), 0, "0% is 0"},
		{7, nil, 7, "null is n"},
		{7, pct(100), 7, "100% is n"},
		{0, pct(50), 0, "n = 0 stays 0"},
		{5, pct(50), 3, "2.5 rounds half up"},
		{5, pct(30), 2, "1.5 rounds half up"},
		{10, pct(34), 3, "3.4 rounds down"},
		{10, pct(35), 4, "3.5 rounds up"},
		{3, pct(50), 2, "1.5 rounds up"},
		{10, pct(33.3), 3, "3.33 rounds down"},
		{10, pct(45.5), 5, "4.55 rounds up"},
		{2, pct(0.5), 1, "0.01 is at least 1"},
		{-4, pct(50), 0, "a negative count is 0"},
		{4, pct(150), 4, "over 100 counts as 100"},
		{4, pct(-3), 0, "under 0 counts as 0"},
	}
	for _, c := range cases {
		if got := serve.CapacityAdjusted(c.n, c.tc); got != c.want {
			tc := "null"
			if c.tc != nil {
				tc = fmt.Sprint(*c.tc)
			}
			t.Errorf("CapacityAdjusted(%d, %s) = %d, want %d (%s)", c.n, tc, got, c.want, c.why)
		}
	}
}

func ExampleCapacityAdjusted() {
	for _, tc := range []float64{0, 1, 25, 40, 100} {
		fmt.Printf("10 replicas at %v%%: %d; 3 replicas: %d\n", tc, serve.CapacityAdjusted(10, &tc), serve.CapacityAdjusted(3, &tc))
	}
	fmt.Println("null:", serve.CapacityAdjusted(10, nil))
	// Output:
	// 10 replicas at 0%: 0; 3 replicas: 0
	// 10 replicas at 1%: 1; 3 replicas: 1
	// 10 replicas at 25%: 3; 3 replicas: 1
	// 10 replicas at 40%: 4; 3 replicas: 1
	// 10 replicas at 100%: 10; 3 replicas: 3
	// null: 10
}

// ExampleRay sets a target capacity on an emulated cluster and reads back
// what is ready.
func ExampleRay() {
	ray := fake.NewRayServe(fake.RayServeOptions{StartPolls: 1})
	srv := httptest.NewServer(ray)
	defer srv.Close()
	side, err := serve.New(serve.Config{
		Dashboard: srv.URL,
		ServeConfig: []byte(`{"applications": [{"name": "llm", "import_path": "llm:app",
		  "deployments": [{"name": "Model", "num_replicas": 3}]}]}`),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for _, p := range []int32{40, 70} {
		if err := side.SetCapacity(ctx, rollout.CapacityRequest{Percent: p}); err != nil {
			fmt.Println(err)
			return
		}
		st, err := side.Capacity(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("capacity %d: ready %d, settled %v\n", st.Capacity, st.Ready, st.Settled)
	}
	// Output:
	// capacity 40: ready 50, settled true
	// capacity 70: ready 84, settled true
}
