// Package brokerconf builds the mochi-mqtt server that kdb-mqtt and the
// benchmark's peer broker (mochi's own storage hooks) both run, so that
// they differ in their storage hook only.
package brokerconf

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
)

// NewServer returns a server with mochi's default capabilities, except
// MaximumInflight: 65,535 (every packet ID), so that an offline persistent
// session keeps what it is sent, and with the allow-all auth hook added.
// The storage hook is added after it.
func NewServer(log *slog.Logger) (*mqtt.Server, error) {
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumInflight = 65535
	srv := mqtt.New(&mqtt.Options{Logger: log, Capabilities: caps})
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		return nil, err
	}
	return srv, nil
}

// Listen adds a TCP listener on addr (port 0 picks one: Address reports it).
func Listen(srv *mqtt.Server, addr string) (*listeners.TCP, error) {
	l := listeners.NewTCP(listeners.Config{Type: listeners.TypeTCP, ID: "tcp", Address: addr})
	if err := srv.AddListener(l); err != nil {
		return nil, err
	}
	return l, nil
}

// Logger is the text logger on stderr both commands use.
func Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// Signals returns a channel that receives SIGINT and SIGTERM.
func Signals() <-chan os.Signal {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	return ch
}
