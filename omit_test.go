package tandem_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestOmitPlugins checks that each build tag really drops its plugin from
// this package and from the tandem binary (plugins are chosen at compile
// time: a tandem_omit_<name> tag leaves one out and nothing registers
// itself at run time), that both still build without it, and that the
// default build links every plugin. An omit build keeps only a plugin's client-side leaf
// packages (clients).
func TestOmitPlugins(t *testing.T) {
	tandemtest.Long(t)
	const mod = "github.com/tandem-kafka/tandem"
	names := []string{"groups", "share", "txn", "acl", "mirror"}
	// The mirror APIs' client side (their messages, the admin client, a
	// mirror's configs) are leaf packages that never import the plugin:
	// tandem mirrors and bench speak them to any broker, so every build
	// has them and they have no omit twins (docs/decisions.md: an omit
	// build drops the plugin, not its client).
	clients := map[string]bool{
		mod + "/plugins/mirror/mirrorproto": true,
		mod + "/plugins/mirror/admin":       true,
		mod + "/plugins/mirror/mirrorcfg":   true,
	}
	deps := func(t *testing.T, tags ...string) string {
		t.Helper()
		args := append([]string{"list", "-deps"}, tags...)
		out, err := exec.Command("go", append(args, mod, mod+"/cmd/tandem")...).CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if !strings.Contains(string(out), mod+"/server\n") {
			t.Fatalf("go list output does not look like the dependencies of %s and cmd/tandem:\n%s", mod, out)
		}
		return string(out)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			tag := "tandem_omit_" + name
			for _, dep := range strings.Fields(deps(t, "-tags", tag)) {
				if clients[dep] {
					continue
				}
				if dep == mod+"/plugins/"+name || strings.HasPrefix(dep, mod+"/plugins/"+name+"/") {
					t.Fatalf("-tags %s still links %s", tag, dep)
				}
			}
			if out, err := exec.Command("go", "vet", "-tags", tag, mod, mod+"/cmd/tandem").CombinedOutput(); err != nil {
				t.Fatalf("%s or cmd/tandem does not build with -tags %s: %v\n%s", mod, tag, err, out)
			}
		})
	}
	all := deps(t)
	for _, name := range names {
		if !strings.Contains(all, mod+"/plugins/"+name+"\n") {
			t.Errorf("the default build does not link plugins/%s", name)
		}
	}
}
