package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// deployDir holds the Grafana dashboard and the Prometheus rules.
var deployDir = filepath.Join("..", "..", "deploy")

// promtool returns the path of promtool, skipping the test without it
// unless TANDEM_REQUIRE_PROMTOOL is set (as .ci/run sets it).
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("TANDEM_REQUIRE_PROMTOOL") != "" {
			t.Fatalf("promtool is required here: %v", err)
		}
		t.Skip("no promtool (Debian's prometheus package has it); .ci/run installs it")
	}
	return path
}

// TestAlertRules: promtool accepts deploy/prometheus/tandem-rules.yml,
// and its unit tests (tandem-rules.test.yml) show each alert firing on
// sample series and staying quiet where it must.
func TestAlertRules(t *testing.T) {
	bin := promtool(t)
	dir := filepath.Join(deployDir, "prometheus")
	for _, args := range [][]string{{"check", "rules", "tandem-rules.yml"}, {"test", "rules", "tandem-rules.test.yml"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
