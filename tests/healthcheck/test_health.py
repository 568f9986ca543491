

def test_a_load_balancer_may_ask_with_head(client):
    answer = client.head("/health")
    assert answer.status_code in (200, 503) and answer.content == b""
