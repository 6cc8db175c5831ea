"""kafkalog.spark"""
