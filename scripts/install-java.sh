#!/usr/bin/env bash
# A Java runtime for the Spark engine (17 or newer; the local engine never needs one).
# Idempotent: does nothing when `java` (or $JAVA_HOME/bin/java) is already 17+. Needs root to install.
set -euo pipefail
min=17
java_bin=${JAVA_HOME:+$JAVA_HOME/bin/}java
major() {
  "$java_bin" -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit}'
}
if command -v "$java_bin" >/dev/null 2>&1 && [[ $(major) -ge $min ]]; then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "error: the Spark engine needs Java $min+ (run as root, or: sudo apt-get install openjdk-17-jre-headless)" >&2
  exit 1
fi
echo "installing a Java $min runtime for Spark"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# Debian 12 ships 17; newer releases ship 21 (Spark 4 runs on both).
pkg=$(apt-cache search --names-only '^openjdk-(17|21)-jre-headless$' | awk '{print $1}' | sort | head -1)
apt-get install -y -qq --no-install-recommends "${pkg:-openjdk-17-jre-headless}" >/dev/null
java_bin=java
[[ $(major) -ge $min ]] || { echo "error: Java $min+ still not found after installing $pkg" >&2; exit 1; }
