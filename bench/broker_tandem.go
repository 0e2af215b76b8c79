package bench

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strconv"

	"github.com/tandem-kafka/tandem/server"
)

// startTandem starts a Tandem broker in this process. spec.Sync sets
// tandem.log.sync unless spec.Props set it.
func startTandem(spec brokerSpec, log *slog.Logger) (string, func(), error) {
	p := map[string]string{"tandem.log.sync": strconv.FormatBool(spec.Sync)}
	maps.Copy(p, spec.Props)
	var plugins []any
	if spec.Plugins != nil {
		plugins = spec.Plugins()
	}
	b, err := server.New(server.Config{NodeID: spec.NodeID, DataDir: spec.Dir, Listen: spec.Listen, Props: p, Plugins: plugins, Logger: log})
	if err != nil {
		return "", nil, fmt.Errorf("tandem: %w", err)
	}
	b.SetProcessMemoryLimit() // as tandem serve: one broker per process
	if err := b.Start(context.Background()); err != nil {
		b.Close()
		return "", nil, fmt.Errorf("tandem start: %w", err)
	}
	return b.Addr(), func() { b.Close() }, nil
}
