// Command kdb-raft-kv is a replicated key-value service: hashicorp/raft
// over loopback TCP, each node's raft log, stable state and data in one kdb
// store (raftkdb and kvfsm), and an HTTP API on 127.0.0.1:
//
//	PUT  /kv/KEY   body: the value, 1 byte to 1 MiB (a longer one is
//	               refused with 413); answered 200 once raft applied it (a
//	               follower forwards the request to the leader)
//	GET  /kv/KEY   the value as this node has applied it (404 if none)
//	GET  /status   this node's raft state, as JSON
//
// One command starts a local three-node cluster (each node a child process):
//
//	kdb-raft-kv -cluster 3 -dir /tmp/kv
//
// Node 1 serves HTTP on 127.0.0.1:8001, node 2 on 8002, node 3 on 8003;
// raft uses 7001..7003. A single node is started with -id, -raft, -http and
// -peers (what -cluster passes its children).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/kdb-project/kdb"
	raftkdb "github.com/kdb-project/kdb/integrations/raft"
	"github.com/kdb-project/kdb/integrations/raft/kvfsm"
)

type peer struct{ id, raft, http string }

func parsePeers(s string) ([]peer, error) {
	var ps []peer
	for _, p := range strings.Split(s, ",") {
		f := strings.Split(p, "=")
		if len(f) != 3 {
			return nil, fmt.Errorf("peer %q: want id=raftaddr=httpaddr", p)
		}
		ps = append(ps, peer{f[0], f[1], f[2]})
	}
	return ps, nil
}

func main() {
	var (
		id        = flag.String("id", "", "this node's id (one of -peers)")
		dir       = flag.String("dir", "", "data directory (with -cluster: the parent of node1, node2, ...)")
		peersFlag = flag.String("peers", "", "every node as id=raftaddr=httpaddr, comma-separated")
		cluster   = flag.Int("cluster", 0, "start a local cluster of this many nodes, each a child process")
		basePort  = flag.Int("base-port", 7000, "with -cluster: node i uses raft port base+i and HTTP port base+1000+i")
		store     = flag.String("store", "kdb", "raft log and stable store: kdb (in the node's kdb store) or boltdb (raft-boltdb/v2 beside it)")
		threshold = flag.Uint64("snapshot-threshold", 8192, "raft SnapshotThreshold: entries between snapshots")
		interval  = flag.Duration("snapshot-interval", 30*time.Second, "raft SnapshotInterval: how often to check the threshold")
		trailing  = flag.Uint64("trailing-logs", 10240, "raft TrailingLogs: entries kept after a snapshot")
		fast      = flag.Bool("fast-timeouts", true, "loopback timeouts (heartbeat and election 300 ms) instead of raft's defaults (1 s)")
		logLevel  = flag.String("log-level", "warn", "raft's log level")
	)
	flag.Parse()
	restrictUmask()
	if *cluster > 0 {
		if *dir == "" {
			log.Fatal("-cluster needs -dir")
		}
		os.Exit(runCluster(*cluster, *dir, *basePort, os.Args[1:]))
	}
	peers, err := parsePeers(*peersFlag)
	if err != nil || *id == "" || *dir == "" {
		log.Fatalf("need -id, -dir and -peers (%v)", err)
	}
	n := &node{id: *id, peers: peers}
	cfg := nodeConfig{dir: *dir, store: *store, threshold: *threshold, interval: *interval,
		trailing: *trailing, fast: *fast, logLevel: *logLevel}
	if err := n.run(cfg); err != nil {
		log.Fatalf("node %s: %v", *id, err)
	}
}

type nodeConfig struct {
	dir, store, logLevel string
	threshold, trailing  uint64
	interval             time.Duration
	fast                 bool
}

type node struct {
	id    string
	peers []peer
	me    peer
	db    *kdb.DB
	fsm   *kvfsm.FSM
	r     *raft.Raft
	start time.Time
	open  time.Duration
	logs  raft.LogStore

	closers []func() error // what boot opened, in order
}

func (n *node) run(cfg nodeConfig) error {
	n.start = time.Now()
	err := n.boot(cfg)
	if err != nil {
		return errors.Join(err, n.close())
	}
	n.open = time.Since(n.start)

	ln, err := net.Listen("tcp", n.me.http)
	if err != nil {
		return errors.Join(err, n.close())
	}
	srv := &http.Server{Handler: n}
	go srv.Serve(ln)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	srv.Shutdown(ctx)
	cancel()
	return n.close()
}

// boot opens the node's stores and starts raft. On error, close releases
// what it opened.
func (n *node) boot(cfg nodeConfig) error {
	for _, p := range n.peers {
		if p.id == n.id {
			n.me = p
		}
	}
	if n.me.id == "" {
		return fmt.Errorf("id %q not in -peers", n.id)
	}
	if err := os.MkdirAll(cfg.dir, 0o750); err != nil {
		return err
	}
	db, err := kdb.Open(filepath.Join(cfg.dir, "kdb"), nil)
	if err != nil {
		return err
	}
	n.db = db
	n.closers = append(n.closers, db.Close)
	var logs raft.LogStore
	var stable raft.StableStore
	switch cfg.store {
	case "kdb":
		s, err := raftkdb.New(db, raftkdb.DefaultNamespace)
		if err != nil {
			return err
		}
		logs, stable = s, s
	case "boltdb":
		s, err := raftboltdb.NewBoltStore(filepath.Join(cfg.dir, "raft.db"))
		if err != nil {
			return err
		}
		n.closers = append(n.closers, s.Close)
		logs, stable = s, s
	default:
		return fmt.Errorf("-store %q: kdb or boltdb", cfg.store)
	}
	if n.fsm, err = kvfsm.Open(db, logs, kvfsm.Options{}); err != nil {
		return err
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "raft-" + n.id, Level: hclog.LevelFromString(cfg.logLevel), Output: os.Stderr})
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.dir, 2, logger)
	if err != nil {
		return err
	}
	// raft starts with NoSnapshotRestoreOnStart (below), taking its newest
	// snapshot as applied; if that snapshot is ahead of the FSM (installed
	// by a leader, the node stopped before the FSM restored it), the FSM
	// restores it first.
	applied := n.fsm.Applied()
	if restored, err := n.fsm.CatchUp(snaps); err != nil {
		return err
	} else if restored {
		logger.Warn("restored the newest snapshot, ahead of the FSM", "fsm-applied-before", applied, "fsm-applied", n.fsm.Applied())
	}
	addr, err := net.ResolveTCPAddr("tcp", n.me.raft)
	if err != nil {
		return err
	}
	trans, err := raft.NewTCPTransportWithLogger(n.me.raft, addr, 3, 10*time.Second, logger)
	if err != nil {
		return err
	}
	n.closers = append(n.closers, trans.Close)
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.id)
	rc.Logger = logger
	rc.SnapshotThreshold = cfg.threshold
	rc.SnapshotInterval = cfg.interval
	rc.TrailingLogs = cfg.trailing
	rc.NoSnapshotRestoreOnStart = true // the FSM is durable in kdb (see kvfsm), and CatchUp ran
	if cfg.fast {
		rc.HeartbeatTimeout = 300 * time.Millisecond
		rc.ElectionTimeout = 300 * time.Millisecond
		rc.LeaderLeaseTimeout = 200 * time.Millisecond
	}
	existing, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return err
	}
	if !existing {
		// Every node bootstraps with the same configuration: raft allows it.
		var c raft.Configuration
		for _, p := range n.peers {
			c.Servers = append(c.Servers, raft.Server{ID: raft.ServerID(p.id), Address: raft.ServerAddress(p.raft)})
		}
		if err := raft.BootstrapCluster(rc, logs, stable, snaps, trans, c); err != nil {
			return err
		}
	}
	n.logs = logs
	r, err := raft.NewRaft(rc, n.fsm, logs, stable, snaps, trans)
	if err != nil {
		return err
	}
	n.r = r
	n.closers = append(n.closers, func() error { return r.Shutdown().Error() })
	return nil
}

// close shuts down what boot started, last first.
func (n *node) close() error {
	var errs []error
	for i := len(n.closers) - 1; i >= 0; i-- {
		errs = append(errs, n.closers[i]())
	}
	n.closers = nil
	return errors.Join(errs...)
}

// maxValue is the largest value a PUT accepts; a longer body is refused
// with 413, never stored cut short.
const maxValue = 1 << 20

var forwardClient = &http.Client{Timeout: 10 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}}

func (n *node) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	switch {
	case req.URL.Path == "/status":
		n.status(w)
	case strings.HasPrefix(req.URL.Path, "/kv/") && len(req.URL.Path) > 4:
		key := []byte(req.URL.Path[4:])
		switch req.Method {
		case http.MethodGet:
			v, err := n.fsm.Get(key)
			if errors.Is(err, kdb.ErrNotFound) {
				http.Error(w, "not found", http.StatusNotFound)
			} else if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			} else {
				w.Write(v)
			}
		case http.MethodPut, http.MethodPost:
			body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxValue))
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				http.Error(w, fmt.Sprintf("value over %d bytes (1 MiB)", maxValue), http.StatusRequestEntityTooLarge)
				return
			}
			if err != nil || len(body) == 0 {
				http.Error(w, "need a value of 1 byte to 1 MiB", http.StatusBadRequest)
				return
			}
			if len(key) > kdb.MaxKeySize {
				// Refused here, not by every node's FSM after raft
				// committed it to every log.
				http.Error(w, fmt.Sprintf("key of %d bytes (max %d)", len(key), kdb.MaxKeySize), http.StatusBadRequest)
				return
			}
			n.put(w, req, key, body)
		default:
			http.Error(w, "GET or PUT", http.StatusMethodNotAllowed)
		}
	default:
		http.Error(w, "GET/PUT /kv/KEY or GET /status", http.StatusNotFound)
	}
}

func (n *node) put(w http.ResponseWriter, req *http.Request, key, value []byte) {
	if n.r.State() != raft.Leader {
		_, leader := n.r.LeaderWithID()
		if leader == "" || req.Header.Get("X-Forwarded") != "" {
			http.Error(w, "no leader", http.StatusServiceUnavailable)
			return
		}
		for _, p := range n.peers {
			if raft.ServerID(p.id) == leader {
				n.forward(w, req, p.http, value)
				return
			}
		}
		http.Error(w, "leader not among the peers", http.StatusServiceUnavailable)
		return
	}
	f := n.r.Apply(kvfsm.EncodePut(key, value), 5*time.Second)
	if err := f.Error(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if err, ok := f.Response().(error); ok && err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "ok %d\n", f.Index())
}

// forward sends the PUT req (whose body was value) to the leader's HTTP
// address and relays the leader's answer.
func (n *node) forward(w http.ResponseWriter, req *http.Request, leader string, value []byte) {
	// The path as the client escaped it: URL.Path is decoded, so a key
	// holding '?', '#' or '%' reached the leader as another key, or as no
	// URL at all.
	freq, err := http.NewRequest(http.MethodPut, "http://"+leader+req.URL.EscapedPath(), bytes.NewReader(value))
	if err != nil {
		http.Error(w, "forward to the leader: "+err.Error(), http.StatusInternalServerError)
		return
	}
	freq.Header.Set("X-Forwarded", n.id)
	resp, err := forwardClient.Do(freq)
	if err != nil {
		http.Error(w, "forward to the leader: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// Status is what GET /status answers.
type Status struct {
	ID          string  `json:"id"`
	State       string  `json:"state"`
	Leader      string  `json:"leader"`
	Term        uint64  `json:"term"`
	CommitIndex uint64  `json:"commit_index"`
	FirstIndex  uint64  `json:"first_index"`
	LastIndex   uint64  `json:"last_index"`
	Applied     uint64  `json:"applied"`
	SnapshotIdx uint64  `json:"last_snapshot_index"`
	Restores    uint64  `json:"restores"`
	OpenSeconds float64 `json:"open_seconds"`
	PID         int     `json:"pid"`
}

func (n *node) status(w http.ResponseWriter) {
	st := n.r.Stats()
	var s Status
	s.ID, s.State, s.PID = n.id, n.r.State().String(), os.Getpid()
	_, leader := n.r.LeaderWithID()
	s.Leader = string(leader)
	fmt.Sscan(st["term"], &s.Term)
	fmt.Sscan(st["commit_index"], &s.CommitIndex)
	fmt.Sscan(st["last_log_index"], &s.LastIndex)
	fmt.Sscan(st["last_snapshot_index"], &s.SnapshotIdx)
	s.FirstIndex, _ = n.logs.FirstIndex()
	s.Applied = n.fsm.Applied()
	s.Restores = n.fsm.Restores()
	s.OpenSeconds = n.open.Seconds()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(s)
}

// runCluster starts nodes child processes of this binary and waits for a
// signal, which it passes on.
func runCluster(nodes int, dir string, base int, args []string) int {
	var peers []string
	for i := 1; i <= nodes; i++ {
		peers = append(peers, fmt.Sprintf("n%d=127.0.0.1:%d=127.0.0.1:%d", i, base+i, base+1000+i))
	}
	// The children get this command's flags minus -cluster, -dir and -base-port.
	var pass []string
	skip := false
	for _, a := range args {
		if skip {
			skip = false
			continue
		}
		name := strings.TrimLeft(strings.SplitN(a, "=", 2)[0], "-")
		if name == "cluster" || name == "dir" || name == "base-port" {
			skip = !strings.Contains(a, "=")
			continue
		}
		pass = append(pass, a)
	}
	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	var cmds []*exec.Cmd
	for i := 1; i <= nodes; i++ {
		a := append([]string{"-id", fmt.Sprintf("n%d", i), "-dir", filepath.Join(dir, fmt.Sprintf("node%d", i)),
			"-peers", strings.Join(peers, ",")}, pass...)
		c := exec.Command(self, a...)
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		if err := c.Start(); err != nil {
			log.Fatal(err)
		}
		cmds = append(cmds, c)
		fmt.Printf("node n%d: pid %d, http://127.0.0.1:%d, raft 127.0.0.1:%d, data %s\n",
			i, c.Process.Pid, base+1000+i, base+i, filepath.Join(dir, fmt.Sprintf("node%d", i)))
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	done := make(chan int, nodes)
	var wg sync.WaitGroup
	for _, c := range cmds {
		wg.Add(1)
		go func() { defer wg.Done(); c.Wait(); done <- 1 }()
	}
	select {
	case <-sig:
	case <-done:
		fmt.Println("a node exited; stopping the others")
	}
	for _, c := range cmds {
		c.Process.Signal(syscall.SIGTERM)
	}
	wg.Wait()
	return 0
}
