package mirrorcmd

import (
	"context"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/tandem-kafka/tandem/cmd/tandem/internal/cli"
	"github.com/tandem-kafka/tandem/internal/properties"
)

// The spellings of the KIP's current revision (its prototype's
// kafka-cluster-mirrors.sh), accepted beside kafka-mirrors.sh's, which
// Tandem prints and documents (docs/mirroring.md says why).

// registerAliases adds the prototype's flags: --start (--add), --stop
// (--remove), --topics (a comma-separated --topic), --exclude (with
// --add), --mirror-config (the mirror's configs from a properties file)
// and --failed (--describe, FAILED partitions only).
func (c *mirrorsCmd) registerAliases(fs *cli.Flags, ops []*mirrorsOp) {
	for _, a := range [][2]string{{"start", "add"}, {"stop", "remove"}} {
		i := slices.IndexFunc(ops, func(op *mirrorsOp) bool { return op.name == a[1] })
		fs.BoolVar(&ops[i].on, a[0], false, "--"+a[1]+", as the KIP's current revision names it")
	}
	fs.Func("topics", "comma-separated `TOPICS` (names or regular expressions): --topic for each", func(v string) error {
		c.topics = append(c.topics, commaList(v)...)
		return nil
	})
	fs.Func("exclude", "with --add (--start): comma-separated `PATTERNS` of topics to leave out, also of those the mirror discovers", func(v string) error {
		c.exclude = append(c.exclude, commaList(v)...)
		return nil
	})
	fs.StringVar(&c.mirrorConfig, "mirror-config", "", "with --create or --failback: the mirror's configs from a properties `FILE` (bootstrap.servers for --source-bootstrap, security settings); --config wins")
	fs.BoolVar(&c.failedOnly, "failed", false, "with --describe: list only the FAILED partitions")
}

func commaList(v string) []string {
	var out []string
	for _, t := range strings.Split(v, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// readMirrorConfig takes --mirror-config's keys as --config flags given
// before the others, and its bootstrap.servers as --source-bootstrap
// unless that is given.
func (c *mirrorsCmd) readMirrorConfig() error {
	if c.mirrorConfig == "" {
		return nil
	}
	f, err := os.Open(c.mirrorConfig)
	if err != nil {
		return cli.UsageErrorf("--mirror-config: %v", err)
	}
	defer f.Close()
	props, err := properties.Read(f)
	if err != nil {
		return cli.UsageErrorf("--mirror-config %s: %v", c.mirrorConfig, err)
	}
	var cfg cli.MultiFlag
	for _, k := range slices.Sorted(maps.Keys(props)) {
		if k == "bootstrap.servers" {
			if c.source == "" {
				c.source = props[k]
			}
			continue
		}
		cfg = append(cfg, k+"="+props[k])
	}
	c.configs = append(cfg, c.configs...) // later wins: the flags
	return nil
}

// isPattern reports whether a --topic is a regular expression rather
// than a topic name (a name has no regular-expression metacharacter).
func isPattern(t string) bool { return regexp.QuoteMeta(t) != t }

// splitAdd divides the topics of --add: names added now (less those
// --exclude matches) and patterns, which the mirror's metadata sync
// matches against the source's topics (mirror.topics.include).
func (c *mirrorsCmd) splitAdd() (names, patterns []string, err error) {
	var ex []*regexp.Regexp
	for _, p := range c.exclude {
		re, err := regexp.Compile("^(?:" + p + ")$")
		if err != nil {
			return nil, nil, cli.UsageErrorf("--exclude %q: %v", p, err)
		}
		ex = append(ex, re)
	}
	for _, t := range c.topics {
		switch {
		case isPattern(t):
			if _, err := regexp.Compile(t); err != nil {
				return nil, nil, cli.UsageErrorf("--topic %q: %v", t, err)
			}
			patterns = append(patterns, t)
		case !slices.ContainsFunc(ex, func(re *regexp.Regexp) bool { return re.MatchString(t) }):
			names = append(names, t)
		}
	}
	return names, patterns, nil
}

// savePatterns appends --add's patterns to the mirror's
// mirror.topics.include and --exclude's to mirror.topics.exclude (which
// also stops mirroring a topic it matches), as the prototype saves them
// for discovery: the metadata sync adds matching source topics.
func (c *mirrorsCmd) savePatterns(ctx context.Context, patterns []string) error {
	if len(patterns) == 0 && len(c.exclude) == 0 {
		return nil
	}
	cfgs, err := c.a.DescribeMirrorConfigs(ctx, c.name)
	if err != nil {
		return err
	}
	set := map[string]string{}
	for key, add := range map[string][]string{"mirror.topics.include": patterns, "mirror.topics.exclude": c.exclude} {
		if len(add) == 0 {
			continue
		}
		var have []string
		for _, cf := range cfgs {
			if cf.Name == key && cf.Value != nil {
				have = commaList(*cf.Value)
			}
		}
		for _, p := range add {
			if !slices.Contains(have, p) {
				have = append(have, p)
			}
		}
		set[key] = strings.Join(have, ",")
	}
	if err := c.a.AlterMirrorConfigs(ctx, c.name, set, nil); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Mirror %s: mirror.topics.include=%s mirror.topics.exclude=%s; its metadata sync adds the matching source topics.\n",
		c.name, orNone(set["mirror.topics.include"]), orNone(set["mirror.topics.exclude"]))
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(unchanged)"
	}
	return s
}
