#!/usr/bin/env bash
# Install the Kernel Forge sandbox as a systemd service on this GPU host. Run as root from a
# checkout (or an unpacked sdist). Safe to run again: keeps existing settings and secrets.
#   deploy/systemd/install.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${1:-python3}

id kforge >/dev/null 2>&1 || useradd --system --home-dir /var/lib/kforge --shell /usr/sbin/nologin kforge
# The GPU device files belong to the video/render groups on most distributions.
for group in video render; do getent group "$group" >/dev/null && usermod -aG "$group" kforge; done

install -d -m 755 /opt/kforge /opt/kforge/docs /etc/kforge
install -d -m 750 -g kforge /etc/kforge/tls
[ -x /opt/kforge/venv/bin/python ] || "$python" -m venv /opt/kforge/venv
/opt/kforge/venv/bin/pip install --quiet --upgrade pip
/opt/kforge/venv/bin/pip install --quiet .
install -m 644 docs/deployment.md /opt/kforge/docs/deployment.md

[ -f /etc/kforge/sandbox.env ] || install -m 644 deploy/systemd/sandbox.env /etc/kforge/sandbox.env
install -m 644 deploy/systemd/kforge-sandbox.service /etc/systemd/system/kforge-sandbox.service
systemctl daemon-reload

missing=()
for f in /etc/kforge/token /etc/kforge/tls/ca.pem /etc/kforge/tls/server.pem /etc/kforge/tls/server.key; do
  [ -s "$f" ] || missing+=("$f")
done
if ((${#missing[@]})); then
  echo "installed; before starting, provide: ${missing[*]} (see docs/deployment.md)"
  echo "then: systemctl enable --now kforge-sandbox"
  exit 0
fi
chmod 600 /etc/kforge/token /etc/kforge/tls/server.key
systemctl enable --now kforge-sandbox
systemctl --no-pager status kforge-sandbox
