package tandem_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestPluginImports checks the plugin seam (docs/architecture.md, "The
// packages": the layering is strict) with go list: no package under
// plugins/ imports the server package (they import the plugin API,
// server/plugin), raftmeta (they take the controller's types from
// raftmeta/metadata and reach it through Host.Metadata) nor another
// plugin (but plugins/builtin, the build's list of them), and the plugin
// API imports no package of this module but engine, engine/coord,
// raftmeta/metadata and prom (the metrics set of Host), so no raft.
func TestPluginImports(t *testing.T) {
	const mod = "github.com/tandem-kafka/tandem/"
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./plugins/...", "./server/plugin").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, imports := strings.TrimPrefix(fields[0], mod), fields[1:]
		seen++
		for _, imp := range imports {
			dep, ours := strings.CutPrefix(imp, mod)
			switch {
			case strings.HasPrefix(imp, "github.com/hashicorp/"):
				t.Errorf("%s imports %s; the seam and the plugins import no raft", pkg, imp)
			case !ours:
			case pkg == "server/plugin":
				if !slices.Contains([]string{"engine", "engine/coord", "raftmeta/metadata", "prom"}, dep) {
					t.Errorf("server/plugin imports %s", dep)
				}
			case dep == "server":
				t.Errorf("%s imports server; plugins import server/plugin", pkg)
			case dep == "raftmeta":
				t.Errorf("%s imports raftmeta; plugins import raftmeta/metadata and reach the controller through Host.Metadata", pkg)
			case strings.HasPrefix(dep, "plugins/") && pluginOf(dep) != pluginOf(pkg) && pkg != "plugins/builtin":
				// plugins/builtin is not a plugin: it is the list of a
				// build's plugins, the one package that names them all.
				t.Errorf("%s imports %s; plugins find each other through server/plugin", pkg, dep)
			}
		}
	}
	if seen < 5 {
		t.Fatalf("go list named %d packages:\n%s", seen, out)
	}
}

// pluginOf is the plugin a package under plugins/ belongs to.
func pluginOf(pkg string) string {
	parts := strings.SplitN(pkg, "/", 3)
	return strings.Join(parts[:min(2, len(parts))], "/")
}
