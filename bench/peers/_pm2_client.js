// Line helper: each stdin line asks the pm2 daemon (over PM2_HOME/rpc.sock, pm2's own
// axon RPC, as `pm2 jlist` does) for its process list; prints one JSON line per request:
// [{name, pid, status}]. Never launches a daemon (unlike pm2.connect()).
// Usage: node _pm2_client.js PM2_PACKAGE_DIR RPC_SOCKET
'use strict';
const path = require('path');
const readline = require('readline');

const pm2dir = process.argv[2];
const axon = require(path.join(pm2dir, 'modules', 'pm2-axon'));
const rpc = require(path.join(pm2dir, 'modules', 'pm2-axon-rpc'));

const req = axon.socket('req');
const client = new rpc.Client(req);
req.on('error', () => {});
req.connect(process.argv[3]);

function out(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

const rl = readline.createInterface({ input: process.stdin });
rl.on('line', () => {
  client.call('getMonitorData', {}, (err, list) => {
    if (err) return out({ error: String(err) });
    return out({
      procs: list.map((p) => ({
        name: p.name, pid: p.pid, status: p.pm2_env && p.pm2_env.status,
      })),
    });
  });
});
rl.on('close', () => process.exit(0));
