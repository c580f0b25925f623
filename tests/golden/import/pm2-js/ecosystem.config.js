// PM2 ecosystem file for the storefront (pm2 start ecosystem.config.js --env production)
const path = require("path");

module.exports = {
  apps: [
    {
      name: "api",
      script: "./dist/server.js",
      cwd: "/srv/storefront",
      instances: 4,
      exec_mode: "cluster",
      node_args: "--max-old-space-size=512",
      env: {
        NODE_ENV: "development",
        PORT: 3000,
      },
      env_production: {
        NODE_ENV: "production",
      },
      max_memory_restart: "300M",
      kill_timeout: 5000,
      wait_ready: true,
      listen_timeout: 10000,
    },
    {
      name: "mailer",
      script: "workers/mailer.py",
      args: ["--queue", "mail", "--batch", "50"],
      cwd: "/srv/storefront",
      autorestart: true,
      max_restarts: 10,
      min_uptime: "5s",
      exp_backoff_restart_delay: 100,
      env: { SMTP_HOST: "smtp.example.com", SMTP_TLS: true },
      error_file: "/var/log/storefront/mailer.err.log",
      out_file: "/var/log/storefront/mailer.out.log",
    },
    {
      script: "bin/thumbnailer",
      args: "--size 128x128 --out '/var/cache/thumbs dir'",
      cwd: path.join(__dirname, "tools"),
      instances: "max",
      restart_delay: 2000,
      stop_exit_codes: [0],
      watch: ["bin"],
    },
    {
      name: "cron: nightly report",
      script: "node scripts/report.js --nightly",
      autorestart: false,
      cron_restart: "0 3 * * *",
    },
  ],

  deploy: {
    production: {
      user: "deploy",
      host: ["shop1.example.com"],
      ref: "origin/main",
      repo: "git@example.com:storefront.git",
      path: "/srv/storefront",
    },
  },
};
