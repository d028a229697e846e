"""A request the server never answers shows the server's log.

When a server goes away mid-test (a scheduler crash, the HTTP process gone
during a weight reload), the client sees only ``RemoteDisconnected`` or a
refused connection; the reason is in the server's log. ``ServerProcess``
puts the log's tail into the error. No server is started here: the
ServerProcess is never started, so its port refuses every connection, and
its log holds what a test writes there.
"""

import os
import shutil
import unittest

import cpu_serving


class TestARequestWithNoAnswerShowsTheServerLog(unittest.TestCase):
    def setUp(self):
        self.server = cpu_serving.ServerProcess([])
        self.addCleanup(shutil.rmtree, self.server.tmpdir, ignore_errors=True)
        with open(self.server.log_path, "w", encoding="utf-8") as log:
            log.write("Scheduler hit an exception: the reason is here\n")

    def test_a_refused_request_raises_server_error_with_the_log_tail(self):
        with self.assertRaises(cpu_serving.ServerError) as raised:
            self.server.request("POST", "/update_weights_from_disk", {}, timeout=5)

        message = str(raised.exception)
        self.assertIn("POST /update_weights_from_disk got no answer", message)
        self.assertIn("the reason is here", message)

    def test_a_server_with_no_log_says_so(self):
        os.remove(self.server.log_path)

        with self.assertRaises(cpu_serving.ServerError) as raised:
            self.server.request("GET", "/server_info", timeout=5)

        self.assertIn("(no log)", str(raised.exception))


if __name__ == "__main__":
    unittest.main()
