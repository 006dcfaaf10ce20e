#!/bin/sh
# Reads {"days_since_delivery": N} on stdin; prints whether a refund is still allowed.
input=$(cat)
days=$(printf '%s' "$input" | tr -cd '0-9')
if [ -n "$days" ] && [ "$days" -le 30 ]; then
  printf '{"eligible": true, "days": %s}\n' "$days"
else
  printf '{"eligible": false}\n'
fi
