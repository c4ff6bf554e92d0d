#!/usr/bin/env bash
python3 -c "import http_client; print(http_client.make_client().retries)" > answer.txt
