package replication

import (
	"log/slog"
	"os"
)

// testLogger logs warnings and errors only, so that test output stays
// short (as the server package's test helper of the same name).
func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
