package ray_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray"
)

// A cluster that follows revisions: each revision is deployed at
// target_capacity 0, recognised from the config Ray reports as deployed,
// and then given capacity. In a Runner, the Deployers of the two clusters
// are DeployA and DeployB, and the Runner makes these calls itself.
func ExampleRay_Deployer() {
	ctx := context.Background()
	srv := httptest.NewServer(fake.NewRayServe(fake.RayServeOptions{})) // an emulated Ray dashboard
	defer srv.Close()

	v1 := `{"applications": [{"name": "shop", "import_path": "shop:app",
	  "runtime_env": {"env_vars": {"VERSION": "1"}}, "deployments": [{"name": "Shop", "num_replicas": 2}]}]}`
	v2 := strings.Replace(v1, `"VERSION": "1"`, `"VERSION": "2"`, 1)
	side, err := ray.New(ray.Config{
		Dashboard: srv.URL,
		Revisions: ray.RevisionMap(map[string]json.RawMessage{"v1": json.RawMessage(v1), "v2": json.RawMessage(v2)}),
	})
	if err != nil {
		panic(err)
	}
	deployer, err := side.Deployer() // rollout.Runner{A: side, DeployA: deployer, ...}
	if err != nil {
		panic(err)
	}

	if err := deployer.Deploy(ctx, "v1"); err != nil { // PUT v1 at target_capacity 0
		panic(err)
	}
	st, _ := deployer.Revision(ctx, "v1")
	fmt.Printf("runs %q, updated %v\n", st.Revision, st.Updated)
	if err := side.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100, Steady: true}); err != nil { // v1's config, target_capacity null
		panic(err)
	}

	err = deployer.Deploy(ctx, "v2")
	fmt.Println("deploy v2 while serving:", errors.Is(err, ray.ErrServing), rollout.IsPermanent(err))

	if err := side.SetCapacity(ctx, rollout.CapacityRequest{Percent: 0}); err != nil {
		panic(err)
	}
	if err := deployer.Deploy(ctx, "v2"); err != nil {
		panic(err)
	}
	st, _ = deployer.Revision(ctx, "v2")
	fmt.Printf("runs %q, updated %v\n", st.Revision, st.Updated)
	// Output:
	// runs "v1", updated true
	// deploy v2 while serving: true true
	// runs "v2", updated true
}
